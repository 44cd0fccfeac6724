# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Copies of a baked revision's backing image held against the nodes: the replica trap and its remedies.

Pure: decisions over objects already read. Facts from upstream:
- Harvester (``pkg/image/backingimage``) creates one Longhorn ``BackingImage`` per VirtualMachineImage in
  ``longhorn-system``, named in the image StorageClass's ``backingImage`` parameter, with
  ``spec.minNumberOfCopies`` taken from that class's ``numberOfReplicas`` (the count Harvester's merge
  kept, which is the template class's when one applies).
- Longhorn (``k8s/pkg/apis/longhorn/v1beta2/backingimage.go``) reports each copy in
  ``status.diskFileStatusMap``, one entry per disk, whose ``state`` is ``ready`` once the file is there;
  it keeps at least ``minNumberOfCopies`` ready copies and makes none for a node added later.
- StorageClass parameters cannot be changed, nor can a VirtualMachineImage's storageClassParameters.

So "in force" is what the backing image holds: its ready copies (and the minimum Longhorn keeps), not
only the class's parameter. A node added after a revision was published leaves that revision one copy
short until its minimum is raised or a new revision is published. Every path asks the functions here:
the registration (``predict`` before anything is written, ``replica_trap`` on the class that won), the
drift report of the operator's environment and the copies report (``short_of``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import harvester_image
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds

API_VERSION = "longhorn.io/v1beta2"
KIND = "BackingImage"
NAMESPACE = "longhorn-system"
READY = "ready"
BACKING_IMAGE_PARAMETER = "backingImage"
REPLICAS_PARAMETER = "numberOfReplicas"
HARVESTER_DEFAULT_REPLICAS = "3"  # what Harvester's merge puts when neither template nor request says
WHAT = "BackingImage copies"


def backing_image_name(storage_class):
    """The BackingImage an image StorageClass names (``parameters.backingImage``), or None."""
    return ((storage_class or {}).get("parameters") or {}).get(BACKING_IMAGE_PARAMETER) or None


def count(value):
    """A replica or copy count as a number, or None when it is not a whole number."""
    text = str(value if value is not None else "").strip()
    return int(text) if text.isdigit() else None


def class_replicas(storage_class):
    return count(((storage_class or {}).get("parameters") or {}).get(REPLICAS_PARAMETER))


def ready_disks(backing_image):
    """The disks (Longhorn disk UUIDs) holding a ready copy of ``backing_image``."""
    files = kinds.status(backing_image).get("diskFileStatusMap") or {} if backing_image else {}
    return sorted(disk for disk, state in files.items() if (state or {}).get("state") == READY)


def holding(revision, image, storage_class=None, backing_image=None, readable=True):
    """What one published revision holds, from its VirtualMachineImage ``image`` (None when gone), the
    image's StorageClass and its BackingImage as read (``readable`` False when the cluster serves no
    BackingImage or it may not be read)."""
    ready = ready_disks(backing_image) if backing_image is not None else None
    return {
        "revision": revision,
        "image": kinds.ref(image) if image else None,
        "storage_class": kinds.name(storage_class) if storage_class else None,
        "class_replicas": class_replicas(storage_class),
        "backing_image": kinds.name(backing_image) if backing_image else backing_image_name(storage_class),
        "min_copies": count(kinds.spec(backing_image).get("minNumberOfCopies")) if backing_image else None,
        "ready_copies": len(ready) if ready is not None else None,
        "ready_disks": ready,
        "readable": bool(readable),
    }


def copies(held):
    """The copies a revision holds for sure: the ready ones when the backing image was read, else the
    class's count (what Longhorn was asked for, not proof that it holds them); None when unknown."""
    if held.get("ready_copies") is not None:
        return held["ready_copies"]
    return held.get("class_replicas")


# ------------------------------------------------------------------------------------ remedies


def dedicated_class_remedy(nodes):
    """The first remedy of the replica trap: a class of its own for baked images. Never the default class,
    which every other volume of the cluster follows (and whose parameters cannot be changed anyway)."""
    return (
        'create a Longhorn StorageClass used only for baked images with numberOfReplicas: "%d" and name it '
        "in storage_class (harvester_upload_storage_class) for the next revisions; leave the cluster default "
        "StorageClass as it is: every other volume follows it" % nodes
    )


def min_copies_remedy(backing_image, nodes):
    name = backing_image or "<the image's backing image>"
    return (
        "raise Longhorn's minimum copies of BackingImage %s/%s to %d (spec.minNumberOfCopies), and Longhorn "
        "copies it to the disks that lack it; no new revision is needed" % (NAMESPACE, name, nodes)
    )


def new_revision_remedy(nodes):
    return (
        "or publish a new revision with replicas %d on that class (an image's copies cannot be changed)"
        % nodes
    )


def remedies(held, nodes):
    """The supported moves for a published revision short of copies, in the order to try them: the one that
    mends the image in use first (more copies of its backing image, in place), then the class that keeps
    the next revisions out of the trap (a class cannot mend an image already made)."""
    if held.get("min_copies") is not None and held["min_copies"] >= nodes:
        return [
            "Longhorn keeps %d copies of BackingImage %s/%s and is still making them: wait, and check its "
            "disks in Longhorn if it does not finish" % (held["min_copies"], NAMESPACE, held["backing_image"])
        ]
    return [
        min_copies_remedy(held.get("backing_image"), nodes),
        dedicated_class_remedy(nodes),
        new_revision_remedy(nodes),
    ]


# ------------------------------------------------------------------------- copies against nodes


def short_of(holdings, nodes):
    """Each revision of ``holdings`` holding fewer copies than ``nodes`` (the schedulable node count), with
    the reason and the remedies: ``[{what, revision, image, backing_image, operator, expected, message,
    move, remedies}]``. Nothing when no node is known; a revision whose copies cannot be known is left to
    ``unknown``."""
    out = []
    if not nodes:
        return out
    for held in holdings:
        have = copies(held)
        if have is None or have >= nodes:
            continue
        if held.get("ready_copies") is not None:
            source = "%d ready cop%s of BackingImage %s/%s (Longhorn keeps %s)" % (
                have,
                "y" if have == 1 else "ies",
                NAMESPACE,
                held["backing_image"],
                "at least %d" % held["min_copies"] if held.get("min_copies") is not None else "no minimum",
            )
        else:
            source = "%d copies by its StorageClass %s (its backing image could not be read)" % (
                have,
                held.get("storage_class"),
            )
        moves = remedies(held, nodes)
        out.append(
            {
                "what": WHAT,
                "revision": held["revision"],
                "image": held.get("image"),
                "backing_image": held.get("backing_image"),
                "operator": have,
                "expected": nodes,
                "message": "revision %s holds %s but %d nodes are schedulable, so a VM on a node without a "
                "copy waits for one at first boot" % (held["revision"], source, nodes),
                "move": moves[0],
                "remedies": moves,
            }
        )
    return out


def unknown(holdings):
    """Revisions whose copies could not be known (no image recorded, the image gone, nothing readable)."""
    return [h["revision"] for h in holdings if copies(h) is None]


def line(holdings, nodes):
    """One line over every published revision's copies against the nodes."""
    if not holdings:
        return "no published revision to compare with the nodes"
    if not nodes:
        return "%d published revisions; no schedulable node is known, so their copies are not compared" % len(
            holdings
        )
    short = short_of(holdings, nodes)
    parts = [
        "%s holds %s of %d" % (h["revision"], copies(h), nodes) for h in holdings if copies(h) is not None
    ]
    text = "%d nodes; %s" % (nodes, ", ".join(parts) or "no revision's copies could be read")
    if short:
        text += "; short: %s; first remedy: %s" % (", ".join(s["revision"] for s in short), short[0]["move"])
    if unknown(holdings):
        text += "; not known: %s" % ", ".join(unknown(holdings))
    return text


# ------------------------------------------------------------------- a new revision, before writing


def in_force(requested, template):
    """The ``numberOfReplicas`` Harvester's merge gives a new image: the template class's when one applies
    (its own count, else Harvester's default), else the count requested, else the default."""
    if template is not None:
        return str(((template.get("parameters") or {}).get(REPLICAS_PARAMETER)) or HARVESTER_DEFAULT_REPLICAS)
    return str(requested) if requested is not None else HARVESTER_DEFAULT_REPLICAS


def replica_trap(requested, found, storage_class_name, template, why, nodes=None):
    """The failure message when the replica count in force (``found``, on ``storage_class_name``, or the
    one Harvester would use) is not the one requested, else None. The first remedy is a dedicated class."""
    if requested is None or str(found) == str(requested):
        return None
    target = int(requested) if nodes is None else max(int(requested), int(nodes))
    where = "StorageClass %s has" % storage_class_name if storage_class_name else "Harvester would use"
    if template:
        cause = (
            "Harvester takes the parameters of the Longhorn StorageClass %s (%s), which has "
            "numberOfReplicas=%s, and ignores storageClassParameters.numberOfReplicas"
            % (template, why, found)
        )
    else:
        cause = "the StorageClass holds numberOfReplicas=%s" % found
    return "replicas: asked for %s copies but %s numberOfReplicas=%s: %s. To fix it: %s" % (
        requested,
        where,
        found,
        cause,
        dedicated_class_remedy(target),
    )


def request(storage_class=None):
    """The part of a new VirtualMachineImage Harvester's merge reads: the template class it names."""
    notes = {harvester_image.SC_ANNOTATION: storage_class} if storage_class else {}
    return {"metadata": {"annotations": notes}}


def predict(subject, requested, image, classes, nodes=None):
    """Refuse, before anything is written, a replica count the target class cannot hold: the class that
    would win (``harvester_image.winning_template`` over ``classes``) keeps another count, or more copies
    are asked than there are schedulable ``nodes`` (None or 0: not known). Returns what the new revision
    would get: ``{requested, in_force, template, why, nodes}``."""
    template_name, why = harvester_image.winning_template(image, classes)
    template = next((c for c in classes if kinds.name(c) == template_name), None) if template_name else None
    found = in_force(requested, template)
    prediction = {
        "requested": requested,
        "in_force": count(found),
        "template": template_name,
        "why": why,
        "nodes": nodes or None,
    }
    message = replica_trap(requested, found, None, template_name, why, nodes)
    if message:
        raise Refusal(subject, message, prediction=prediction)
    if requested is not None and nodes and int(requested) > nodes:
        raise Refusal(
            subject,
            "replicas is %s but %d nodes are schedulable: with one Longhorn disk per node (Harvester's "
            "layout) the backing image never reaches %s copies, and a second copy on one node spares no VM "
            "a wait" % (requested, nodes, requested),
            "give replicas %d (the node count)" % nodes,
            prediction=prediction,
        )
    return prediction
