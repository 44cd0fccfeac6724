"""The verifier program as its Job runs it: an image without dissect fails naming the package and installs
nothing unless --install-missing is given; the image the collection ships pins what the program expects."""

import json
import os
import pathlib
import subprocess
import sys

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import _seal_cli as seal_cli
from ansible_collections.goldenimage.pipeline.plugins.module_utils.windows import _export_cli as export_cli

ROOT = pathlib.Path(__file__).resolve().parents[4]
MIB = 1024 * 1024


def requirement_lines(path):
    return [line for line in path.read_text().splitlines() if line and not line.startswith("#")]


@pytest.mark.parametrize(
    "image, extra", [("seal-verifier", ()), ("golden-export", export_cli.S3_REQUIREMENTS)]
)
def test_the_images_pin_exactly_the_programs_requirements(image, extra):
    folder = ROOT / "images" / image
    assert requirement_lines(folder / "requirements.txt") == list(seal_cli.DISSECT_REQUIREMENTS + extra)
    assert "-r /tmp/requirements.txt" in (folder / "Containerfile").read_text()


def test_the_tests_run_the_export_with_the_images_boto3():
    """The lab runs the export program with the test environment's Python: its boto3 is the image's."""
    pins = [line for line in requirement_lines(ROOT / "requirements.txt") if line.startswith("boto3==")]
    assert pins == list(export_cli.S3_REQUIREMENTS)


def run_without_dissect(disk):
    """The program under this Python with no site-packages (-S): a stock image without dissect, and no pip."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / ".collections"), PIP_INDEX_URL="http://127.0.0.1:9/nothing")
    return subprocess.run(
        [sys.executable, "-S", "-m", seal_cli.__name__, str(disk), "--os", "windows"],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def verdict(out):
    line = [x for x in out.stdout.splitlines() if x.startswith(seal_cli.MARKER)][-1]
    return json.loads(line[len(seal_cli.MARKER) :])


def windows_disk(tmp_path):
    """A GPT disk whose basic data partition holds an empty NTFS: its table is read without dissect, its
    files are not."""
    disk = tmp_path / "disk.raw"
    volume = tmp_path / "c.ntfs"
    disk.write_bytes(bytes(8 * MIB))
    volume.write_bytes(bytes(4 * MIB))
    table = "label: gpt\nstart=2048, size=8192, type=EBD0A0A2-B9E5-4433-87C0-68B6B72699C7\n"
    subprocess.run(
        ["sfdisk", "-q", "--no-reread", "--no-tell-kernel", str(disk)], input=table, text=True, check=True
    )
    subprocess.run(["mkntfs", "-q", "-F", "-f", str(volume)], check=True, capture_output=True)
    with open(disk, "r+b") as fh:
        fh.seek(2048 * 512)
        fh.write(volume.read_bytes())
    return disk


def test_an_image_without_dissect_fails_naming_the_package_and_installs_nothing(tmp_path):
    disk = windows_disk(tmp_path)
    out = run_without_dissect(disk)
    result = verdict(out)
    assert out.returncode == 2, out
    assert result["missing"].startswith("dissect.") and "not installed" in result["error"], result
    assert "pip" not in out.stderr and "Collecting" not in out.stdout + out.stderr
