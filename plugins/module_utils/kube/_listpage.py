# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""One page of a Kubernetes list body, parsed into plain dicts.

A page is parsed with the standard ``json`` module, or, when msgspec is installed and the caller does
not keep ``metadata.managedFields``, by a schema that skips that field without building it, which saves
most of the CPU a fleet-sized list costs (bench/README.md, "List page parsing").

Both ways give the same dicts. The schema names every key it may meet and refuses any other one (an
item's top level beyond ``apiVersion``/``kind``/``metadata``/``spec``/``status``, ObjectMeta beyond its
API fields, a number or string msgspec does not read the way ``json`` does); a refused page is parsed
again with ``json``. So nothing but ``managedFields`` is ever left out, whatever the kind or server.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

# (decoder, its error type) once built; (None, None) without msgspec. Lists on several threads may each
# build it once: every build is the same, and the assignment is atomic.
_lean_pair = None


def decode_page(body, managed_fields=False):
    """The list body ``body`` (bytes) as a dict; without ``metadata.managedFields`` unless asked."""
    if not managed_fields:
        decoder, refused = _lean()
        if decoder is not None:
            try:
                return decoder(body)
            except refused:
                pass  # a key or value outside the schema: json below gives the page whole
    answer = json.loads(body)
    if not managed_fields:
        for item in answer.get("items") or []:
            if isinstance(item, dict) and isinstance(item.get("metadata"), dict):
                item["metadata"].pop("managedFields", None)
    return answer


def _lean():
    global _lean_pair
    if _lean_pair is None:
        _lean_pair = _build()
    return _lean_pair


def _build():
    try:
        import msgspec
    except ImportError:
        return None, None
    from typing import Any, List, Optional, Union

    unset = msgspec.UNSET
    skipped = Union[msgspec.Raw, msgspec.UnsetType]

    class Meta(msgspec.Struct, forbid_unknown_fields=True):
        # ObjectMeta as the API defines it; managedFields is read as raw bytes and never kept.
        name: Any = unset
        generateName: Any = unset
        namespace: Any = unset
        selfLink: Any = unset
        uid: Any = unset
        resourceVersion: Any = unset
        generation: Any = unset
        creationTimestamp: Any = unset
        deletionTimestamp: Any = unset
        deletionGracePeriodSeconds: Any = unset
        labels: Any = unset
        annotations: Any = unset
        ownerReferences: Any = unset
        finalizers: Any = unset
        managedFields: skipped = unset

    class Item(msgspec.Struct, forbid_unknown_fields=True):
        apiVersion: Any = unset
        kind: Any = unset
        metadata: Union[Meta, msgspec.UnsetType] = unset
        spec: Any = unset
        status: Any = unset

    class Page(msgspec.Struct, forbid_unknown_fields=True):
        apiVersion: Any = unset
        kind: Any = unset
        metadata: Any = unset
        items: Optional[List[Item]] = unset

    decode = msgspec.json.Decoder(Page).decode
    to_builtins = msgspec.to_builtins

    def decoder(body):
        page = decode(body)
        for item in page.items or ():
            if item.metadata is not unset:
                item.metadata.managedFields = unset
        return to_builtins(page)  # unset fields are left out, as absent keys

    return decoder, msgspec.DecodeError
