"""A stateful property test of backing-image copies against the nodes (the replica trap): revisions are
published with a minimum of copies, nodes join and leave, Longhorn copies each image onto disks up to its
minimum (never onto a node that joined later unless the minimum is raised), a minimum is raised.

After every step: ``backing_copies.short_of`` names exactly the revisions whose ready copies are fewer
than the schedulable nodes, counted by the model itself; its first remedy for a short revision mends the
image in use (Longhorn's minimum copies raised to the nodes; or waiting, while the minimum already covers
them), then a class of its own for the next revisions, never a change to the cluster default class.
"""

from __future__ import annotations

from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import backing_copies
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule


class CopiesMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.nodes = ["node-1", "node-2", "node-3"]
        self.joined = 3
        self.revisions = {}  # name -> {"min": n, "disks": {disk: state}}

    def longhorn_copies(self, name):
        """Longhorn keeps min ready copies, one per disk of a node that is there."""
        image = self.revisions[name]
        for node in self.nodes:
            ready = [d for d, s in image["disks"].items() if s == "ready"]
            if len(ready) >= image["min"]:
                break
            image["disks"].setdefault("disk-" + node, "ready")

    @rule(copies=st.integers(min_value=1, max_value=5))
    def publish(self, copies):
        name = "v%03d" % len(self.revisions)
        self.revisions[name] = {"min": copies, "disks": {}}
        self.longhorn_copies(name)

    @rule()
    def node_joins(self):
        self.joined += 1
        self.nodes.append("node-%d" % self.joined)

    @precondition(lambda self: len(self.nodes) > 1)
    @rule(data=st.data())
    def node_leaves(self, data):
        node = data.draw(st.sampled_from(self.nodes))
        self.nodes.remove(node)
        for image in self.revisions.values():
            if "disk-" + node in image["disks"]:
                image["disks"]["disk-" + node] = "unknown"

    @precondition(lambda self: self.revisions)
    @rule(data=st.data())
    def minimum_raised(self, data):
        name = data.draw(st.sampled_from(sorted(self.revisions)))
        self.revisions[name]["min"] = len(self.nodes)
        self.longhorn_copies(name)

    def holdings(self):
        out = []
        for name, image in sorted(self.revisions.items()):
            backing = {
                "metadata": {"name": "vmi-" + name, "namespace": backing_copies.NAMESPACE},
                "spec": {"minNumberOfCopies": image["min"]},
                "status": {"diskFileStatusMap": {d: {"state": s} for d, s in image["disks"].items()}},
            }
            out.append(backing_copies.holding(name, None, backing_image=backing))
        return out

    @invariant()
    def short_revisions_are_exactly_those_with_fewer_ready_copies_than_nodes(self):
        expected = {
            name
            for name, image in self.revisions.items()
            if sum(1 for s in image["disks"].values() if s == "ready") < len(self.nodes)
        }
        short = backing_copies.short_of(self.holdings(), len(self.nodes))
        assert {s["revision"] for s in short} == expected
        for entry in short:
            first = entry["remedies"][0]
            if self.revisions[entry["revision"]]["min"] >= len(self.nodes):
                assert first.startswith("Longhorn keeps"), entry
            else:
                assert first == backing_copies.min_copies_remedy(entry["backing_image"], len(self.nodes))
                assert backing_copies.dedicated_class_remedy(len(self.nodes)) in entry["remedies"]
                assert not any("set numberOfReplicas" in r for r in entry["remedies"]), entry


# Pure and fast: 200 sequences of up to 30 steps in the normal unit tier.
test_copies_state_machine = CopiesMachine.TestCase
test_copies_state_machine.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)
