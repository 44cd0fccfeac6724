"""The CustomResourceDefinitions the lab installs at start.

KubeVirt's, CDI's and the CSI snapshot API's are generated from their upstream Go API types by
tools/build-crds.sh into the lab's cache (pinned, reused when present): full structural schemas that
prune unknown fields, as a real cluster has them. The kinds no served Go module describes are written
by hand in tests/lab/crds/*.yaml, each naming its upstream file and release.
"""

from __future__ import annotations

import json
import pathlib

import yaml

CRD_DIR = pathlib.Path(__file__).with_name("crds")
BUILD_SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "tools" / "build-crds.sh"

# The DBInstance operator's API group and version vary by installation; its CRD file carries these
# defaults in exactly the places (name, group, version names) that must follow the configuration.
_DB_GROUP = "db.goldenimage.io"
_DB_VERSION = "v1alpha1"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def generated_dir() -> pathlib.Path:
    """The directory of the CRDs generated from the upstream types (generated when missing)."""
    from .apiserver import built_dir

    return built_dir(BUILD_SCRIPT, "LAB_CRD_DIR")


def crd_files() -> list[pathlib.Path]:
    """The hand-written CRD files, then the generated ones, each in file-name order."""
    return sorted(CRD_DIR.glob("*.yaml")) + sorted(generated_dir().glob("*.yaml"))


def load_crds(dbinstance_group: str = _DB_GROUP, dbinstance_version: str = _DB_VERSION) -> list[dict]:
    """Every CRD as independent dicts ready to POST."""
    crds = []
    for path in crd_files():
        text = path.read_text(encoding="utf-8")
        if path.name == "dbinstance.yaml":
            text = text.replace(_DB_GROUP, dbinstance_group).replace(_DB_VERSION, dbinstance_version)
        crds += read_documents(text)
    return crds


def read_documents(text: str) -> list[dict]:
    """The YAML documents of one CRD file's text, each an independent dict."""
    # YAML anchors share nodes between places; a JSON round trip unshares them so callers may change
    # each place on its own.
    return [json.loads(json.dumps(doc)) for doc in yaml.load_all(text, Loader=_LOADER) if doc]
