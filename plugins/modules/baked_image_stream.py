#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: baked_image_stream
short_description: Move the tip of a baked image OS stream, validate it, make it the default
version_added: 0.1.0
description:
  - Each OS stream of the baked image catalog (C(22.04), C(24.04)) has a tip revision and a C(validated)
    flag; one stream is the default, the one new databases get.
  - O(revision) moves the tip. The revision must be in the catalog (registered by
    M(goldenimage.pipeline.baked_image)), imported (its C(VirtualMachineImage) is C(Imported=True) now
    when the catalog names the image, whatever the catalog says; else the catalog says so), and of the
    stream's OS. A revision whose image does not exist or is not imported is refused, naming the revision
    and the image; so is O(validated=true) or O(default=true) for a stream whose current tip's image is
    gone. The catalog never keeps saying C(imported=true) for such an image; its entry is written with
    C(imported=false) first (in check mode the refusal says it would be, and nothing is written), and the
    refusal says so. Nothing else is written.
  - No catalog entry keeps a signed URL or user-info; an entry holding one (written by an older release or
    by hand) is written back without it by any run that reads it, with a warning naming the revisions.
  - A revision reaches a tip, a sign-off or the default only with the facts read from its bytes recorded in
    its catalog entry (C(facts), written by M(goldenimage.pipeline.baked_image) given
    O(goldenimage.pipeline.baked_image#module:artifact)) and agreeing with it (the OS stream and PostgreSQL
    majors it is declared, no private key, no initialized cluster). A revision registered without them is
    refused, saying to register it again with its artifact.
  - Moving the tip resets C(validated) to false unless
    O(validated) is given, since the sign-off belongs to a revision.
  - O(validated) records the sign-off; O(default=true) makes the stream the default, which requires it to be
    validated. The default stream always stays validated, so its tip moves only with O(validated=true).
  - Validation is evidence, not a flag. O(validated=true) is refused unless the last smoke test recorded for
    the revision it validates passed. O(smoke_test) records one. The test DBInstance, provisioned from the
    revision, is read now; the test passes when it is C(Available) on that revision and answers with an
    C(engineVersion) the revision carries. The record (time, who ran it, the instance, the engine version,
    the result and why it failed) is kept in the revision's catalog entry (C(smoke_tests)), whatever the
    result; a failed test then refuses O(validated=true) in the same task. The build never validates; run
    this after the test instance is up, in its own run.
  - A smoke test is one observation of one object, identified by the instance's uid and resourceVersion
    and the result, so running the task again while the instance is unchanged (after a lost reply, say)
    records nothing new and reports no change.
  - Concurrent writers are safe (resourceVersion, retried on a conflict). A write whose reply was lost after
    the server committed it is read back, and counts as done when the catalog holds what was sent.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  os_version:
    description:
      - The OS stream, C(22.04) or C(24.04).
      - Give it as a quoted string; an unquoted YAML number (C(24.10) reads as C(24.1)) is refused.
    type: raw
    required: true
  revision:
    description: The revision to put at the tip of the stream, for example C(v20261201-2404).
    type: str
  validated:
    description: Whether the tip revision passed testing. Omitted keeps it (or resets it when the tip moves).
    type: bool
  default:
    description:
      - V(true) makes this stream the default OS stream. V(false) is refused for the current default (make
        another stream the default instead) and changes nothing otherwise.
    type: bool
  rollback:
    description:
      - V(true) lets O(revision) be older than the stream's tip (a tip moved back after a bad image). Without
        it such a move is refused, since every instance on the newer tip would be offered a repave to the
        older image. The sign-off belongs to a revision, so the older one needs O(validated) again.
    type: bool
    default: false
  smoke_test:
    description:
      - The test DBInstance provisioned from the revision (O(revision), else the stream's tip), read now and
        recorded as the revision's smoke test.
    type: dict
    suboptions:
      namespace:
        description: Namespace of the test DBInstance.
        type: str
        required: true
      name:
        description: Name of the test DBInstance.
        type: str
        required: true
      api_version:
        description: API group and version that serves the DBInstance kind.
        type: str
        default: db.goldenimage.io/v1alpha1
  drops_majors:
    description:
      - The PostgreSQL majors this change drops knowingly. A change (a tip moved, a default flipped) that
        leaves running databases on a major not yet past end of life that the tip of their stream no longer
        carries is refused unless every such major is named here. Every DBInstance in the cluster is read, in
        every namespace and every API group that serves the kind, not one namespace the caller names.
      - The instances affected are returned in RV(stranded) and warned about either way.
    type: list
    elements: raw
    default: []
  migration_grace_months:
    description:
      - Months after a major's end of life that a database still running it may run before it is deleted
        whatever its owner does. Recorded in the catalog (C(migration_grace_months)); default 3 when the
        catalog holds none.
    type: int
  tested_by:
    description:
      - Who ran the smoke test, recorded with it. Defaults to the user running the task on the controller.
    type: str
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - goldenimage.pipeline.catalog.required
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_k8s
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: The diff is the catalog YAML before and after.
  idempotent:
    support: full
notes:
  - "Runs on the controller; use C(delegate_to: localhost) when the play targets other hosts."
seealso:
  - module: goldenimage.pipeline.baked_image
"""

EXAMPLES = r"""
- name: Put the new 24.04 build at the tip of its stream, not validated yet
  goldenimage.pipeline.baked_image_stream:
    os_version: "24.04"
    revision: v20261201-2404
    catalog: {namespace: dbaas-system, name: baked-image-catalog}

- name: After a test DBInstance from it is Available, record the smoke test, sign it off, make it the default
  goldenimage.pipeline.baked_image_stream:
    os_version: "24.04"
    smoke_test: {namespace: dbaas-smoke, name: smoke-v20261201-2404}
    validated: true
    default: true
    catalog: {namespace: dbaas-system, name: baked-image-catalog}
"""

RETURN = r"""
changed:
  description: Whether the catalog was (or, in check mode, would be) changed.
  returned: always
  type: bool
stream:
  description: The stream after the task.
  returned: success
  type: dict
  sample: {tip: v20261201-2404, validated: false}
default_stream:
  description: The default OS stream after the task.
  returned: success
  type: str
  sample: "22.04"
catalog:
  description:
    - The whole catalog document after the task (in check mode, the prediction).
    - With a refusal after C(imported=false) was recorded (in check mode, would be), the catalog so written.
  returned: success, and with that refusal
  type: dict
smoke_test:
  description: The smoke test observed by this task (C(revision), C(dbinstance), C(uid), C(resource_version),
    C(at), C(by), C(phase), C(engine_version), C(result) V(passed) or V(failed), C(reason)); recorded unless
    the last record of the revision is the same observation.
  returned: when O(smoke_test) is given
  type: dict
  sample: {revision: v20261201-2404, dbinstance: dbaas-smoke/smoke-v20261201-2404, uid: 0b3f5c1e-8d2a-4f7e,
           resource_version: "48213", at: "2026-12-02T10:04:11Z",
           by: ops, phase: Available, engine_version: "17", result: passed, reason: null}
stranded:
  description:
    - The databases this change leaves on a major the tip of their stream no longer carries, though it is
      not past end of life (the operator marks them C(PGVersionEOL) and refuses their repaves). Their
      migrate-by date is the major's end of life and they are deleted after the grace the catalog holds;
      neither is counted from a build date. On a refusal, the same list.
  returned: success, and with that refusal
  type: list
  elements: dict
  sample:
    - {namespace: orders, name: pg-1, major: "15", stream: "22.04", tip: v20261201, eol_date: "2027-11-11",
       migrate_by: "2027-11-11", deleted_after: "2028-02-11"}
diff:
  description: The catalog YAML before and after, with C(--diff).
  returned: when diff mode is on
  type: dict
"""

import datetime
import getpass

from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import (
    catalog,
    harvester_image,
    revision,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked._catalog_store import (
    CatalogStore,
    catalog_options,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import (
    PipelineError,
    run_module,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeModule
from ansible_collections.goldenimage.pipeline.plugins.module_utils.repave._dbinstances import all_dbinstances


def argument_spec():
    return dict(
        os_version=dict(type="raw", required=True),
        revision=dict(type="str"),
        validated=dict(type="bool"),
        default=dict(type="bool"),
        rollback=dict(type="bool", default=False),
        catalog=catalog_options(required=True),
        smoke_test=dict(
            type="dict",
            options=dict(
                namespace=dict(type="str", required=True),
                name=dict(type="str", required=True),
                api_version=dict(type="str", default="db.goldenimage.io/v1alpha1"),
            ),
        ),
        tested_by=dict(type="str"),
        drops_majors=dict(type="list", elements="raw", default=[]),
        migration_grace_months=dict(type="int"),
    )


def observed_import(module, doc, name):
    """``(imported, missing)`` of revision ``name``'s VirtualMachineImage now: whether it is
    Imported=True and whether it does not exist. ``(None, False)`` when the catalog names no image
    (the rules then decide from the catalog). An image the catalog says is imported but that is gone
    (or failed) is not: a stream never moves onto a stale ``imported: true``."""
    entry = doc["images"].get(name) if name else None
    if not entry or not entry.get("image"):
        return None, False
    ref = entry["image"]
    obj = module.get(harvester_image.API_VERSION, harvester_image.KIND, ref.get("name"), ref.get("namespace"))
    if obj is None:
        return False, True
    return harvester_image.imported(obj), False


def update(store, change):
    """``store.update(change)``; a refusal of the rules names the catalog."""
    try:
        return store.update(change)
    except catalog.CatalogError as exc:
        raise PipelineError("%s: %s" % (store.where, exc.msg), **dict(exc.fields, refused=True)) from None


def written_first(module, store, exc, name, first):
    """The refusal ``exc`` of a run that wrote the catalog first (in check mode: would write it),
    ``first`` being that ``(before, after, changed)``: it says what, and carries that catalog (and its
    diff)."""
    fields = dict(exc.fields, changed=True, catalog=first[1])
    if module._diff:
        fields["diff"] = {"before": catalog.dump(first[0]), "after": catalog.dump(first[1])}
    was, now = ((doc["images"].get(name) or {}).get("imported") for doc in first[:2])
    if not (was and not now):
        return PipelineError(exc.msg, **fields)
    return PipelineError(
        "%s; %s %s imported: false for revision %s, whose image is not imported now"
        % (exc.msg, store.where, "would record" if module.check_mode else "recorded", name),
        **fields,
    )


def run(module):
    """Move the stream as asked; returns the result, raises PipelineError for a refusal."""
    p = module.params
    store = CatalogStore(module, p["catalog"])
    text = inputs.version_string(p["os_version"], "os_version")
    try:
        stream = revision.validate_stream(text)
    except PipelineError as exc:
        raise PipelineError("%s: %s" % (store.where, exc.msg), refused=True) from None
    doc = store.read()
    # Without a revision, a sign-off or default still lands on the current tip: observe that one.
    name = p["revision"] or (doc["streams"].get(stream) or {}).get("tip")
    imported, missing = observed_import(module, doc, name)

    def observe(doc):
        if imported is False:
            return catalog.mark_imported(doc, name, False)
        if imported:
            return catalog.mark_imported(doc, p["revision"])
        return doc, False

    # Every database in the cluster, all namespaces: a tip moved or a default flipped that drops a major
    # they run strands them.
    databases = []
    if p["revision"] or p["default"]:
        databases = [d for d in map(catalog.database_of, all_dbinstances(module)) if d]
    tested = observed_smoke_test(module, doc, name) if p["smoke_test"] else None
    if tested is not None:
        # The record stays whatever the rest of the task decides: it is what was observed.
        first_test = update(store, lambda d: catalog.record_smoke_test(d, tested))
        doc = first_test[1]

    # The catalog never keeps saying imported: true for an image that is gone or not imported: that is
    # written first, so a move the rules then refuse leaves the catalog telling the truth.
    first = update(store, observe) if imported is False else None

    def change(doc):
        if tested is not None and module.check_mode:  # the record check mode did not write
            doc = catalog.record_smoke_test(doc, tested)[0]
        given = doc
        current = (doc["streams"].get(stream) or {}).get("tip")
        doc, marked = observe(doc)
        doc, moved = catalog.set_stream(
            doc,
            stream,
            tip=p["revision"],
            validated=p["validated"],
            default=p["default"],
            imported=imported,
            missing=missing,
            rollback=p["rollback"],
        )
        # After the rules on the image itself, which say more: the facts read from its bytes, then the
        # evidence of a smoke test.
        if (p["revision"] and p["revision"] != current) or p["validated"] or p["default"]:
            catalog.require_recorded_facts(given, stream, p["revision"] or current)
        if p["validated"]:
            catalog.require_validation_evidence(given, stream, p["revision"])
        if p["migration_grace_months"] is not None:
            doc, graced = catalog.set_grace(doc, p["migration_grace_months"])
            moved = moved or graced
        found[:] = catalog.stranded(given, doc, databases)
        catalog.require_named_drops(found, p["drops_majors"])
        return doc, marked or moved

    found = []
    try:
        before, after, changed = update(store, change)
    except PipelineError as exc:
        if not (first and first[2]):
            raise
        raise written_first(module, store, exc, name, first) from None
    if first and first[2]:
        before, changed = first[0], True
    if tested is not None and first_test[2]:
        before, changed = first_test[0], True
    result = {
        "changed": changed,
        "stream": after["streams"].get(stream, {}),
        "default_stream": after["default_stream"],
        "catalog": after,
    }
    if tested is not None:
        result["smoke_test"] = tested
    result["stranded"] = found
    for entry in found:
        module.warn(
            "DBInstance %s/%s runs PostgreSQL %s, which the tip of stream %s no longer carries: it turns "
            "PGVersionEOL; its owner migrates it by %s, it is deleted after %s"
            % (
                entry["namespace"],
                entry["name"],
                entry["major"],
                entry["stream"],
                entry["migrate_by"],
                entry["deleted_after"],
            )
        )
    if module._diff:
        result["diff"] = {"before": catalog.dump(before), "after": catalog.dump(after)}
    return result


DBINSTANCE_API = "db.goldenimage.io/v1alpha1"


def observed_smoke_test(module, doc, name):
    """The smoke test of revision ``name`` on the DBInstance O(smoke_test) names, as it is now."""
    test = module.params["smoke_test"]
    if not name:
        raise PipelineError("smoke_test: the stream has no tip to test; give the revision", refused=True)
    instance = module.get(
        test.get("api_version") or DBINSTANCE_API, "DBInstance", test["name"], test["namespace"]
    )
    ref = "%s/%s" % (test["namespace"], test["name"])
    at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    by = module.params["tested_by"] or getpass.getuser()
    try:
        return catalog.smoke_test(doc, name, ref, instance, at, by)
    except catalog.CatalogError as exc:
        raise PipelineError(exc.msg, refused=True) from None


def main():
    module = KubeModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(module, lambda: run(module))


if __name__ == "__main__":
    main()
