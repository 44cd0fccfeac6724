"""The CustomResourceDefinitions the lab installs at start (tests/lab/crds/*.yaml)."""

from __future__ import annotations

import json
import pathlib

import yaml

CRD_DIR = pathlib.Path(__file__).with_name("crds")
# Schemas several CRDs share (a VMI spec in a VirtualMachine's template, a DataVolume spec in a
# DataImportCron's template) are written once, in crds/fragments/<name>.yaml; a CRD names one with the
# mapping {x-lab-fragment: <name>} where the schema goes, and load_crds puts the fragment there.
FRAGMENT_DIR = CRD_DIR / "fragments"
_FRAGMENT_KEY = "x-lab-fragment"

# The DBInstance operator's API group and version vary by installation; its CRD file carries these
# defaults in exactly the places (name, group, version names) that must follow the configuration.
_DB_GROUP = "db.goldenimage.io"
_DB_VERSION = "v1alpha1"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_crds(dbinstance_group: str = _DB_GROUP, dbinstance_version: str = _DB_VERSION) -> list[dict]:
    """Every CRD, in file-name order, as independent dicts ready to POST or register."""
    crds = []
    for path in sorted(CRD_DIR.glob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        if path.name == "dbinstance.yaml":
            text = text.replace(_DB_GROUP, dbinstance_group).replace(_DB_VERSION, dbinstance_version)
        crds += read_documents(text)
    return crds


def read_documents(text: str) -> list[dict]:
    """The YAML documents of one CRD file's text, its fragments put in, each an independent dict."""
    # YAML anchors share nodes between places; a JSON round trip unshares them so callers may change
    # each place on its own.
    return [json.loads(json.dumps(_resolve(doc))) for doc in yaml.load_all(text, Loader=_LOADER) if doc]


def _resolve(node):
    if isinstance(node, dict):
        if set(node) == {_FRAGMENT_KEY}:
            path = FRAGMENT_DIR / (node[_FRAGMENT_KEY] + ".yaml")
            return _resolve(yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER))
        return {key: _resolve(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_resolve(item) for item in node]
    return node
