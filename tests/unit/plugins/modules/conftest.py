"""Make the collection importable as ``ansible_collections.goldenimage.pipeline``."""

import os
import sys

_COLLECTIONS = os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".collections")
)
if _COLLECTIONS not in sys.path:
    sys.path.insert(0, _COLLECTIONS)
