"""The bucket side keeps the layering: modules import no boto3/socket/subprocess, pure files no adapter."""

import ast
import pathlib

import pytest

PLUGINS = pathlib.Path(__file__).resolve().parents[4] / "plugins"
MODULES = [
    "os_mirror_object",
    "os_mirror_catalog",
    "golden_export_object",
    "bucket_exposure",
    "bucket_object_url",
]
MODULES.append("windows_iso")
PURE = ["mirror", "exposure", "iso"]
NEVER_IN_MODULES = {"boto3", "botocore", "socket", "subprocess"}
NEVER_IN_PURE = NEVER_IN_MODULES | {"kubernetes", "time"}


def imported(path):
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update("%s.%s" % (node.module, alias.name) for alias in node.names)
    return names


def roots(names):
    return {name.split(".")[0] for name in names}


@pytest.mark.parametrize("name", MODULES)
def test_modules_import_no_client_library_subprocess_or_socket(name):
    assert roots(imported(PLUGINS / "modules" / (name + ".py"))) & NEVER_IN_MODULES == set()


@pytest.mark.parametrize("name", PURE)
def test_pure_files_import_no_adapter_client_or_clock(name):
    names = imported(PLUGINS / "module_utils" / (name + ".py"))
    assert roots(names) & NEVER_IN_PURE == set()
    assert [n for n in names if n.rsplit(".", 1)[-1].startswith("_") and "module_utils" in n] == []
