"""console_screenshot's runner called directly: bad options are refused before any request."""

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import _kube
from ansible_collections.goldenimage.pipeline.plugins.modules import console_screenshot


def runner(**params):
    with patch_module_args(dict({"name": "vm", "namespace": "ns"}, **params)):
        module = _kube.KubeModule(argument_spec=console_screenshot.argument_spec(), supports_check_mode=True)
    return module, console_screenshot.Screenshot(module)


@pytest.mark.parametrize(
    "params, message",
    [
        ({"timeout": 0}, "option timeout: 0 is not a duration"),
        ({"match_distance": -1}, "option match_distance: -1 is not a Hamming distance"),
        ({"stuck_after": -1}, "option stuck_after: -1 is not a number of seconds"),
    ],
)
def test_bad_options_are_refused_before_any_request(params, message):
    module, screenshot = runner(**params)
    with pytest.raises(Refusal, match=message):
        screenshot.run()
    assert module._kube_client is None  # the API was never contacted
