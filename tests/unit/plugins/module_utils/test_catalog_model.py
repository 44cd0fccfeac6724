"""A stateful property test over the baked image catalog, through the rules that guard it.

Publish revisions (whose bytes say an OS and majors, declared the same or not), record smoke tests,
validate, flip the default stream. After every step: the default stream is validated on evidence, and
every tip's recorded facts match what it is declared to be. Pure model: fast, in the unit tier.
"""

from __future__ import annotations

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils import catalog, image_facts
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

STREAMS = ("22.04", "24.04")
MAJORS = st.sets(st.sampled_from(["15", "16", "17", "18"]), min_size=1).map(sorted)


def facts_of(stream, majors, snakeoil=False):
    """The facts document an artifact of ``stream`` with the servers of ``majors`` reads as."""
    keys = [{"path": image_facts.SNAKEOIL_KEY, "kind": "tls_snakeoil_key", "pem": "PRIVATE KEY", "size": 9}]
    return image_facts.document(
        "linux",
        os_release={
            "id": "ubuntu",
            "version_id": stream,
            "version_codename": None,
            "pretty_name": None,
            "path": "/etc/os-release",
        },
        machine_id="empty",
        private_keys=keys if snakeoil else [],
        postgresql=image_facts.postgresql_fact({m: True for m in majors}, [], {}),
    )


class CatalogModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.doc = catalog.empty()
        self.day = 0

    def _revision(self, stream):
        self.day += 1
        suffix = "" if stream == "22.04" else "-2404"
        return "v202612%02d%s" % (self.day, suffix) if self.day < 29 else None

    @rule(
        stream=st.sampled_from(STREAMS),
        bytes_stream=st.sampled_from(STREAMS),
        majors=MAJORS,
        declared=MAJORS,
        snakeoil=st.booleans(),
    )
    def publish(self, stream, bytes_stream, majors, declared, snakeoil):
        name = self._revision(stream)
        if name is None:
            return
        facts = facts_of(bytes_stream, majors, snakeoil)
        problems = image_facts.declaration_problems(facts, stream, declared)
        if problems:  # baked_image refuses before anything is written
            with pytest.raises(image_facts.Refusal):
                image_facts.refuse_contradicted("revision %s" % name, problems, facts)
            return
        self.doc, _ = catalog.register_image(
            self.doc,
            name,
            stream,
            declared,
            "%0128x" % self.day,
            "upload",
            facts=image_facts.catalog_facts(facts),
            imported=True,
        )
        self.move_tip(stream, name)

    def move_tip(self, stream, name):
        """baked_image_stream moving a tip: the stream rules, then the facts recorded for the revision."""
        try:
            moved, _ = catalog.set_stream(self.doc, stream, tip=name)
            catalog.require_recorded_facts(self.doc, stream, name)
        except catalog.CatalogError:
            return  # the default stream's tip waits for validation; a revision without facts is refused
        self.doc = moved

    @rule(stream=st.sampled_from(STREAMS), majors=MAJORS)
    def publish_without_artifact(self, stream, majors):
        """baked_image without artifact: the revision is registered on its declaration alone."""
        name = self._revision(stream)
        if name is None:
            return
        self.doc, _ = catalog.register_image(
            self.doc, name, stream, majors, "%0128x" % self.day, "upload", imported=True
        )
        self.move_tip(stream, name)

    @rule(stream=st.sampled_from(STREAMS), available=st.booleans(), engine=st.sampled_from(["", "16", "17"]))
    def smoke_test(self, stream, available, engine):
        tip = (self.doc["streams"].get(stream) or {}).get("tip")
        if not tip:
            return
        instance = {
            "status": {
                "phase": "Available" if available else "Provisioning",
                "appliedSpec": {"imageRevision": tip, "engineVersion": engine},
            }
        }
        record = catalog.smoke_test(self.doc, tip, "smoke/pg", instance, "t%d" % self.day, "ops")
        self.doc, _ = catalog.record_smoke_test(self.doc, record)

    @rule(stream=st.sampled_from(STREAMS), default=st.booleans())
    def validate(self, stream, default):
        if not (self.doc["streams"].get(stream) or {}).get("tip"):
            return
        try:  # baked_image_stream: evidence first, then the stream rules
            catalog.require_validation_evidence(self.doc, stream)
            self.doc, _ = catalog.set_stream(self.doc, stream, validated=True, default=default or None)
        except catalog.CatalogError:
            pass

    @invariant()
    def no_unvalidated_default(self):
        stream = self.doc["default_stream"]
        if stream:
            entry = self.doc["streams"][stream]
            assert entry["validated"]
            assert catalog.validation_evidence(self.doc, entry["tip"]) is not None

    @invariant()
    def every_tip_is_what_its_bytes_say(self):
        for stream, entry in self.doc["streams"].items():
            image = self.doc["images"][entry["tip"]]
            facts = image["facts"]
            assert facts["os_release"]["version_id"] == stream == image["os_version"]
            assert facts["pg_majors"] == image["pg_versions"]
            assert facts["private_keys"] == [] and facts["initialized_clusters"] == []


CatalogModel.TestCase.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
test_catalog_model = CatalogModel.TestCase
