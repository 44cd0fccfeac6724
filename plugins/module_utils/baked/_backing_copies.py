# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Reads what ``backing_copies`` decides on: the schedulable nodes, the StorageClasses, and for each
published revision its VirtualMachineImage, the image's StorageClass and its Longhorn BackingImage. Reads
only (get and list); decides nothing."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import (
    backing_copies,
    harvester_image,
    operator_env,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeError

FORBIDDEN = 403


def schedulable_nodes(module, warn_what):
    """The names of the schedulable Nodes, or None (with a warning saying ``warn_what`` is not reported)
    when Nodes may not be listed."""
    try:
        return operator_env.schedulable_nodes(module.list(kinds.CORE, "Node"))
    except KubeError as exc:
        module.warn("cannot list Nodes (%s): %s" % (exc.msg, warn_what))
        return None


def storage_classes(module):
    return module.list(kinds.STORAGE, "StorageClass")


def _backing_image(module, name):
    """``(BackingImage or None, readable)``: not served or forbidden reads as not readable."""
    if not name or not module.served(backing_copies.API_VERSION, backing_copies.KIND):
        return None, False
    try:
        return module.get(
            backing_copies.API_VERSION, backing_copies.KIND, name, backing_copies.NAMESPACE
        ), True
    except KubeError as exc:
        if exc.status == FORBIDDEN:
            module.warn("cannot read BackingImage %s/%s: %s" % (backing_copies.NAMESPACE, name, exc.msg))
            return None, False
        raise


def held_by_image(module, revision, image):
    """What the VirtualMachineImage ``image`` (as read) of ``revision`` holds."""
    if image is None:
        return backing_copies.holding(revision, None)
    name = harvester_image.storage_class_of(image)
    storage_class = module.get(kinds.STORAGE, "StorageClass", name) if name else None
    found, readable = _backing_image(module, backing_copies.backing_image_name(storage_class))
    return backing_copies.holding(revision, image, storage_class, found, readable)


def published(module, doc):
    """What every published revision of the catalog ``doc`` (imported, its image recorded) holds."""
    held = []
    for revision, entry in sorted((doc or {}).get("images", {}).items()):
        ref = entry.get("image") or {}
        if not entry.get("imported"):
            continue
        image = None
        if ref.get("name") and ref.get("namespace"):
            image = module.get(
                harvester_image.API_VERSION, harvester_image.KIND, ref["name"], ref["namespace"]
            )
        held.append(held_by_image(module, revision, image))
    return held
