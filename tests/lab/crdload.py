"""The CustomResourceDefinitions the lab installs at start (tests/lab/crds/*.yaml)."""

from __future__ import annotations

import json
import pathlib

import yaml

CRD_DIR = pathlib.Path(__file__).with_name("crds")

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
        for doc in yaml.load_all(text, Loader=_LOADER):
            if doc:
                # YAML anchors share nodes between places; a JSON round trip unshares them so callers
                # may change each place on its own.
                crds.append(json.loads(json.dumps(doc)))
    return crds
