"""A stateful property test over the baked image catalog, through the rules that guard it.

Publish revisions (whose bytes say an OS and majors, declared the same or not), record smoke tests,
validate, flip the default stream, with databases running on the tips. After every step: the default
stream is validated on evidence, every tip's recorded facts match what it is declared to be, and no database
on a major not past end of life is made PGVersionEOL by a publish unless the publish named that major as
dropped. Pure model: fast, in the unit tier.
"""

from __future__ import annotations

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import apt_release, catalog
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import image_facts
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

STREAMS = ("22.04", "24.04")
MAJORS = st.sets(st.sampled_from(["14", "15", "16", "17", "18"]), min_size=1).map(sorted)
PEM = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n"
TODAY = "2026-12-06"  # PostgreSQL 14 is past its end of life (2026-11-12), 15 to 18 are not


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
        self.fleet = []  # {namespace, name, stream (None: the default), major}
        self.dropped = set()  # majors a publish named as dropped
        self.manifests = {}  # revision -> the manifest record its first registration recorded
        self.trust = None  # the trust section last accepted

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
        self.register(name, stream, declared, facts)
        self.move_tip(stream, name)

    def register(self, name, stream, majors, facts):
        """baked_image registering revision ``name`` with the facts read from its artifact and the package
        manifest its build wrote."""
        built = {
            "revision": name,
            "packages": ["openssl=3.0.%d" % self.day, "postgresql-17=17.%d" % self.day],
        }
        record = apt_release.manifest_record(built, "%064x" % self.day)
        self.doc, _changes = catalog.register_image(
            self.doc,
            name,
            stream,
            majors,
            "%0128x" % self.day,
            "upload",
            facts=image_facts.catalog_facts(facts),
            imported=True,
            manifest=record,
        )
        self.manifests[name] = record

    @rule(data=st.data())
    def record_another_manifest(self, data):
        """A registration of a published revision with another package manifest is refused."""
        if not self.manifests:
            return
        name = data.draw(st.sampled_from(sorted(self.manifests)))
        entry = self.doc["images"][name]
        other = apt_release.manifest_record({"packages": ["openssl=9"]}, "f" * 64)
        with pytest.raises(catalog.CatalogError, match="another package manifest"):
            catalog.register_image(
                self.doc,
                name,
                entry["os_version"],
                entry["pg_versions"],
                entry["checksum"],
                entry["source"],
                manifest=other,
            )

    def move_tip(self, stream, name, drops=()):
        """baked_image_stream moving a tip: the stream rules, the facts recorded for the revision, then the
        databases it would strand, every one of the cluster."""
        try:
            moved, _changes = catalog.set_stream(self.doc, stream, tip=name)
            catalog.require_recorded_facts(self.doc, stream, name)
            found = catalog.stranded(self.doc, moved, self.fleet, today=TODAY)
            catalog.require_named_drops(found, drops)
        except catalog.CatalogError:
            return  # the default stream's tip waits for validation; a revision without facts is refused
        self.dropped |= {e["major"] for e in found} & set(drops)  # only what the run named
        self.doc = moved

    @rule(stream=st.sampled_from(STREAMS), data=st.data())
    def move_back(self, stream, data):
        """A tip moved to an older revision of its stream is refused unless the run says rollback."""
        tip = (self.doc["streams"].get(stream) or {}).get("tip")
        older = sorted(
            n for n, e in self.doc["images"].items() if e["os_version"] == stream and tip and n < tip
        )
        if not older:
            return
        name = data.draw(st.sampled_from(older))
        before = catalog.dump(self.doc)
        with pytest.raises(catalog.CatalogError, match="is older than %s" % tip):
            catalog.set_stream(self.doc, stream, tip=name)
        assert catalog.dump(self.doc) == before

    @rule(stream=st.sampled_from(STREAMS + (None,)), major=st.sampled_from(["14", "15", "16", "17"]))
    def provision(self, stream, major):
        """A database created on the tip of its stream (the default when None), if that tip carries it."""
        wanted = stream or self.doc["default_stream"]
        tip = (self.doc["streams"].get(wanted) or {}).get("tip") if wanted else None
        if tip and major in self.doc["images"][tip]["pg_versions"]:
            self.fleet.append(
                {
                    "namespace": "ns%d" % (len(self.fleet) % 3),
                    "name": "db%d" % len(self.fleet),
                    "stream": stream,
                    "major": major,
                }
            )

    @rule(stream=st.sampled_from(STREAMS), majors=MAJORS, drop=st.booleans())
    def publish_dropping(self, stream, majors, drop):
        """A publish whose run names (or not) every major the new tip leaves out."""
        name = self._revision(stream)
        if name is None:
            return
        facts = facts_of(stream, majors)
        self.register(name, stream, majors, facts)
        left_out = {"14", "15", "16", "17", "18"} - set(majors)
        self.move_tip(stream, name, drops=sorted(left_out) if drop else ())

    @rule(stream=st.sampled_from(STREAMS), majors=MAJORS)
    def publish_without_artifact(self, stream, majors):
        """baked_image without artifact: the revision is registered on its declaration alone."""
        name = self._revision(stream)
        if name is None:
            return
        self.doc, _changes = catalog.register_image(
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
        self.doc, _changes = catalog.record_smoke_test(self.doc, record)

    @rule(stream=st.sampled_from(STREAMS), default=st.booleans())
    def validate(self, stream, default):
        if not (self.doc["streams"].get(stream) or {}).get("tip"):
            return
        try:  # baked_image_stream: evidence first, then the stream rules, then the databases a flip strands
            catalog.require_validation_evidence(self.doc, stream)
            moved, _changes = catalog.set_stream(self.doc, stream, validated=True, default=default or None)
            catalog.require_named_drops(catalog.stranded(self.doc, moved, self.fleet, today=TODAY), ())
        except catalog.CatalogError:
            return
        self.doc = moved

    @rule(
        relax=st.sampled_from(STREAMS + (None,)),
        reason=st.sampled_from(["", "  ", "lab stream, never served"]),
        streams=st.sets(st.sampled_from(STREAMS)).map(sorted),
    )
    def set_trust_policy(self, relax, reason, streams):
        """A trust policy is stored only when every relaxed stream records its reason."""
        key = {"name": "release", "public_key": PEM}
        if streams:
            key["streams"] = streams
        section = {"keys": [key], "streams": {}}
        if relax:
            section["streams"][relax] = {"require_signature": False, "reason": reason}
        if relax and not reason.strip():
            with pytest.raises(
                catalog.CatalogError, match=r"trust\.streams\.%s\.reason" % relax.replace(".", r"\.")
            ):
                catalog.set_trust(self.doc, section)
            return
        self.doc, _changed = catalog.set_trust(self.doc, section)
        self.trust = self.doc["trust"]

    @invariant()
    def the_trust_policy_survives_every_write_and_relaxes_only_with_a_reason(self):
        stored = catalog.load(catalog.dump(self.doc))
        assert stored.get("trust") == self.trust
        policy = catalog.trust_policy(stored)
        if policy is not None:
            assert all(reason.strip() for reason in policy["relaxed_streams"].values())

    @invariant()
    def no_unvalidated_default(self):
        stream = self.doc["default_stream"]
        if stream:
            entry = self.doc["streams"][stream]
            assert entry["validated"]
            # A passing smoke test of the tip is on record (a later failed one of a tip already validated
            # is recorded too, and does not withdraw the sign-off).
            tests = self.doc["images"][entry["tip"]].get("smoke_tests") or []
            assert any(t["result"] == catalog.PASSED for t in tests), tests

    @invariant()
    def no_supported_database_made_pg_version_eol_unless_named(self):
        for item in self.fleet:
            if item["major"] == "14" or item["major"] in self.dropped:
                continue  # past end of life anyway, or dropped by a run that named it
            stream = item["stream"] or self.doc["default_stream"]
            tip = self.doc["streams"][stream]["tip"]
            assert item["major"] in self.doc["images"][tip]["pg_versions"], (item, tip)

    @invariant()
    def every_tip_is_what_its_bytes_say(self):
        for stream, entry in self.doc["streams"].items():
            image = self.doc["images"][entry["tip"]]
            facts = image["facts"]
            assert facts["os_release"]["version_id"] == stream == image["os_version"]
            assert facts["pg_majors"] == image["pg_versions"]
            assert facts["private_keys"] == [] and facts["initialized_clusters"] == []

    @invariant()
    def every_tip_can_be_checked_for_a_rebuild_from_the_catalog_alone(self):
        tips = catalog.stream_tips(self.doc)
        assert sorted(t[0] for t in tips) == sorted(self.doc["streams"])
        if not tips:
            return
        compared, missing = apt_release.comparisons(tips, [])
        assert missing == []
        for item in compared:
            assert item["manifest"] == self.manifests[item["revision"]]  # as first recorded
            assert apt_release.manifest_packages(item["manifest"], item["revision"])


CatalogModel.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
test_catalog_model = CatalogModel.TestCase
