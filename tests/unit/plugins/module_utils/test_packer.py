"""What Packer says: its version, whether it has init, a build's step."""

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import packer
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError


def test_version_and_init():
    assert packer.version("Packer v1.6.6\n\nYour version of Packer is out of date!") == "1.6.6"
    assert packer.has_init("1.7.0") and packer.has_init("1.11.2") and not packer.has_init("1.6.6")
    with pytest.raises(PipelineError, match="printed no version"):
        packer.version("command not found")


def test_the_last_step_is_the_phase():
    log = "==> qemu: Retrieving ISO\n    qemu: Found already downloaded\n==> qemu: Waiting for SSH...\n"
    assert packer.phase(log) == "qemu: Waiting for SSH..."
    assert packer.line("/w", log, 95.7) == "Packer build in /w: qemu: Waiting for SSH... after 95s"
    assert packer.line("/w", "", 1) == "Packer build in /w: starting after 1s"
    assert packer.failed_message("/w", 1, log).startswith(
        "packer build in /w failed (rc 1) at qemu: Waiting for SSH..."
    )
