"""What a module costs to load: kubernetes and dissect come in only on the code path that needs them.

Each check runs in a fresh interpreter (the test process has imported everything already).
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[4]
PREFIX = "ansible_collections.goldenimage.pipeline.plugins"
HEAVY = ("kubernetes", "dissect", "urllib3", "yaml")


def loaded_after(code):
    """Top-level names of the heavy libraries in sys.modules after running ``code`` in a fresh Python."""
    probe = code + (
        "\nimport json, sys"
        "\nprint(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in %r)))" % (HEAVY,)
    )
    env = {"PYTHONPATH": "%s:%s" % (ROOT / ".collections", ROOT), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True, cwd=str(ROOT)
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "module",
    [
        "modules.seal_verify",
        "modules.golden_info",
        "module_utils.kube._kube",
        "module_utils.disk._disk",
        "module_utils.disk._seal_cli",
        "module_utils.disk.seal",
    ],
)
def test_importing_a_module_pulls_in_neither_kubernetes_nor_dissect(module):
    loaded = loaded_after("import %s.%s" % (PREFIX, module))
    assert [m for m in loaded if m.split(".")[0] in ("kubernetes", "dissect")] == []


def test_a_qcow2_is_opened_with_the_qcow2_reader_alone(tmp_path):
    assert shutil.which("qemu-img"), "qemu-img is a declared dependency (make setup installs qemu-utils)"
    image = tmp_path / "disk.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(image), "64G"], check=True)
    loaded = loaded_after(
        "from %s.module_utils.disk import _disk\n"
        "img = _disk.Image(%r)\n"
        "assert img.virtual_size == 64 * 1024 ** 3 and img.format == 'qcow2', img.virtual_size\n"
        "assert img.read(0, 512) == bytes(512)\n" % (PREFIX, str(image))
    )
    assert "dissect.hypervisor.disk.qcow2" in loaded
    others = [m for m in loaded if m.startswith("dissect.hypervisor.") and "qcow2" not in m]
    # Only the reader, its structure definitions and its exceptions: no other format's definitions.
    assert sorted(others) == ["dissect.hypervisor.disk", "dissect.hypervisor.exceptions"]


def test_the_partition_table_is_read_without_any_disk_library(tmp_path):
    assert shutil.which("sfdisk")
    image = tmp_path / "disk.raw"
    image.write_bytes(bytes(4 * 1024 * 1024))
    subprocess.run(
        ["sfdisk", "-q", "--no-reread", "--no-tell-kernel", str(image)],
        input="label: gpt\nstart=2048, size=2048\n",
        text=True,
        check=True,
    )
    loaded = loaded_after(
        "from %s.module_utils.disk import _disk, _partitions\n"
        "parts = _partitions.read_partitions(_disk.Image(%r))\n"
        "assert [p['number'] for p in parts] == [1], parts\n" % (PREFIX, str(image))
    )
    assert [m for m in loaded if m.split(".")[0] == "dissect"] == []
