#!/usr/bin/env python3
"""API requests and wall time of golden_info and of per-project verification over many projects.

Starts a lab with the storage controllers only (the per-project copies are made here, in the
seeder's layout, so nothing waits on a resync), makes goldens of three families (one selected, one
on the label path with one active, one with none active) plus a Block golden, then grows the
project count in steps. At each step it measures:

- golden_info through its own list calls and golden_inventory.report, ``--repeat`` times;
- verification of one (family, mode) the way golden_selection verifies: listed, not fetched;
- the same verification done naively, one GET of the copy and one of its content per project,
  for comparison;
- the API server floor: golden_info's pages fetched and read whole, never parsed, after each module run
  (``--floor-pages`` at other page sizes too), so the module's own share and its growth show apart from
  the server's;
and at the last step runs the module once through ansible-playbook, with its peak memory, and once more
on the list adapter that kept each object's managedFields. Requests come from the lab's audit log. Exits
non-zero when the listed approaches send more requests as projects grow.

With --store the goldens and projects are written through the API (many at once), bound and ready,
with no controller running, so fleets of tens of thousands of projects are seeded in minutes; the
figures then also give the CPU of this process and of the lab per report, and their growth.

    .venv/bin/python bench/golden_info.py [--projects 50,500] [--repeat 5]
    .venv/bin/python bench/golden_info.py --store --no-naive --no-playbook --projects 500,5000,50000
    .venv/bin/python bench/golden_info.py --smoke

Ends with the issue's figures: each size against the baseline, 50,000 projects against its 10 s (the wall
time, and the module's own CPU apart from kube-apiserver's, which shares this machine's cores) and the
growth between sizes against linear (see bench/verdict.py).
"""

from __future__ import annotations

import argparse
import itertools
import json
import pathlib
import re
import statistics
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / ".collections"))

from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import golden_inventory, selection  # noqa: E402
from ansible_collections.goldenimage.pipeline.plugins.modules import golden_info  # noqa: E402

from bench.labproc import (  # noqa: E402
    COLLECTIONS,
    LabProcess,
    add_direct_argument,
    baseline_collections,
    in_parallel,
    load,
    playbook,
)
from bench.verdict import floor_lines, golden_info_cpu_lines, golden_info_lines  # noqa: E402

GROUP, VERSION = "snapshot.storage.k8s.io", "v1"
FS_NS, BLOCK_NS = "golden-images", "golden-images-block"
PROJECT_LABEL = "kube-dc.com/project"
DRIVER = "hostpath.lab.goldenimage.io"
# family -> (versioned name suffixes, active index or None, selected index or None)
FAMILIES = {
    "debian-12": (["20260101-0123456789ab", "20260828-f0dea74da9c5"], 1, None),
    "ubuntu-24-04": (["20260301-aaaaaaaaaaaa", "20260801-bbbbbbbbbbbb", "20260901-cccccccccccc"], None, None),
    "windows-11": (["20260809-dddddddddddd", "20260828-eeeeeeeeeeee"], None, 0),
}
VERIFY_FAMILY = "debian-12"
# The list adapter, and the last revision whose lists kept each object's managedFields.
ADAPTER = "plugins/module_utils/kube/_kube.py"
KEEPS_MANAGED_FIELDS = "3ef1c85"
# The arms measured after the dynamic client's in each paired run: the adapter, the adapter on json pages,
# the API server floor.
ARMS = ["adapter", "json", "floor"]


class Lister:
    """Just what golden_info.observe needs of a module: list and served, on the kubernetes client.

    By default it lists as KubeModule.list did before it read raw pages (the dynamic client's
    ResourceInstance, then ``to_dict``): the baseline. ``raw`` parses one unpaged response body.
    """

    def __init__(self, api_client, raw=False):
        from kubernetes.dynamic import DynamicClient

        self.dynamic = DynamicClient(api_client)
        self.resources = {}
        self.raw = raw

    def resource(self, api_version, kind):
        key = (api_version, kind)
        if key not in self.resources:
            prefix = {} if "/" in api_version else {"prefix": "api"}
            self.resources[key] = self.dynamic.resources.get(api_version=api_version, kind=kind, **prefix)
        return self.resources[key]

    def served(self, api_version, kind):
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        try:
            self.resource(api_version, kind)
        except ResourceNotFoundError:
            return False
        return True

    def list_each(self, queries):
        """One list after the other, as KubeModule listed before it had several in flight."""
        return [self.list(q["api"], q["kind"], q["namespace"], q["selector"]) for q in queries]

    def list(self, api_version, kind, namespace=None, label_selector=None):
        res = self.resource(api_version, kind)
        params = {"label_selector": label_selector} if label_selector else {}
        namespace = namespace if res.namespaced else None
        if self.raw:
            return json.loads(res.get(namespace=namespace, serialize=False, **params).data).get("items") or []
        return res.get(namespace=namespace, **params).to_dict().get("items") or []


class World:
    def __init__(self, lab, kubeconfig):
        from kubernetes import client, config

        self.lab = lab
        self.api = config.new_client_from_config(str(kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.handles = {}  # golden name -> snapshot handle
        self.goldens = {}  # family -> [names]
        self.projects = 0

    def namespace(self, name, labels=None):
        self.core.create_namespace({"metadata": {"name": name, "labels": labels or {}}})

    def pvc(self, namespace, name, mode="Filesystem", source=None, storage_class=None):
        spec = {
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": mode,
            "resources": {"requests": {"storage": "4Mi"}},
        }
        if storage_class:
            spec["storageClassName"] = storage_class
        if source:
            spec["dataSource"] = {"apiGroup": GROUP, "kind": "VolumeSnapshot", "name": source}
        self.core.create_namespaced_persistent_volume_claim(
            namespace, {"metadata": {"name": name}, "spec": spec}
        )

    def wait(self, check, what, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.2)
        raise SystemExit("timed out waiting for %s" % what)

    def golden(self, namespace, name, family, pvc, active=False):
        mode = "Block" if namespace == BLOCK_NS else "Filesystem"
        labels = {"kube-dc.com/golden-os": family, "kube-dc.com/golden-mode": mode}
        if active:
            labels["kube-dc.com/golden-active"] = "true"
        body = {
            "apiVersion": "%s/%s" % (GROUP, VERSION),
            "kind": "VolumeSnapshot",
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": {
                    "kube-dc.com/os-family-id": family,
                    "kube-dc.com/os-name": family,
                    "kube-dc.com/golden-mode": mode,
                },
            },
            "spec": {"source": {"persistentVolumeClaimName": pvc}},
        }
        self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "volumesnapshots", body)

    def snapshot(self, namespace, name):
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "volumesnapshots", name)

    def arrange_goldens(self):
        present = {n.metadata.name for n in self.core.list_namespace().items}
        for ns in (FS_NS, BLOCK_NS):  # the lab makes Kube-DC's golden namespaces itself
            if ns not in present:
                self.namespace(ns)
        self.pvc(FS_NS, "disk")
        self.pvc(BLOCK_NS, "raw", mode="Block")
        for family, (suffixes, active, _) in FAMILIES.items():
            names = ["golden-%s-%s" % (family, s) for s in suffixes]
            self.goldens[family] = names
            for i, name in enumerate(names):
                self.golden(FS_NS, name, family, "disk", active=(i == active))
        self.golden(BLOCK_NS, "golden-debian-12-20260828-f0dea74da9c5", "debian-12", "raw", active=True)
        for names in self.goldens.values():
            for name in names:
                self.wait(
                    lambda n=name: (self.snapshot(FS_NS, n).get("status") or {}).get("readyToUse"), name
                )
                bound = self.snapshot(FS_NS, name)["status"]["boundVolumeSnapshotContentName"]
                content = self.custom.get_cluster_custom_object(
                    GROUP, VERSION, "volumesnapshotcontents", bound
                )
                self.handles[name] = content["status"]["snapshotHandle"]
        for family, (_, _, selected) in FAMILIES.items():
            if selected is None:
                continue
            body = {
                "apiVersion": "kube-dc.com/v1",
                "kind": "GoldenImageSelection",
                "metadata": {"name": "%s-filesystem" % family},
                "spec": {
                    "family": family,
                    "mode": "Filesystem",
                    "snapshotName": self.goldens[family][selected],
                },
            }
            self.custom.create_namespaced_custom_object(
                "kube-dc.com", "v1", FS_NS, "goldenimageselections", body
            )

    def served(self, family):
        """The golden the seeder would serve (bench layout: active, else selected, else first listed)."""
        _, active, selected = FAMILIES[family]
        index = selected if selected is not None else active if active is not None else 0
        return self.goldens[family][index]

    def seed(self, project, family, golden_name):
        content = "kdc-%s-%s-fs" % (project, family)
        snap = "golden-%s" % family
        self.custom.create_cluster_custom_object(
            GROUP,
            VERSION,
            "volumesnapshotcontents",
            {
                "apiVersion": "%s/%s" % (GROUP, VERSION),
                "kind": "VolumeSnapshotContent",
                "metadata": {"name": content},
                "spec": {
                    "deletionPolicy": "Retain",
                    "driver": DRIVER,
                    "source": {"snapshotHandle": self.handles[golden_name]},
                    "volumeSnapshotRef": {"name": snap, "namespace": project},
                },
            },
        )
        body = {
            "apiVersion": "%s/%s" % (GROUP, VERSION),
            "kind": "VolumeSnapshot",
            "metadata": {
                "name": snap,
                "labels": {"kube-dc.com/golden-os": family, "kube-dc.com/golden-mode": "Filesystem"},
                "annotations": {
                    "kube-dc.com/clone-min-size": "4Mi",
                    "kube-dc.com/seeded-from": "%s/%s" % (FS_NS, golden_name),
                },
            },
            "spec": {"source": {"volumeSnapshotContentName": content}},
        }
        self.custom.create_namespaced_custom_object(GROUP, VERSION, project, "volumesnapshots", body)

    def add_projects(self, total, threads=2):
        """Projects up to ``total``: each seeded with every family; every 25th stale; every 10th clones."""
        start = self.projects
        errors = []

        def work(indexes):
            try:
                for i in indexes:
                    name = "proj-%04d" % i
                    self.namespace(name, {PROJECT_LABEL: "bench"})
                    for family in FAMILIES:
                        served = self.served(family)
                        stale = i % 25 == 0 and family == VERIFY_FAMILY
                        self.seed(name, family, self.goldens[family][0] if stale else served)
                    if i % 10 == 0:
                        # Never bound (no such class): the report reads only the claim's source.
                        self.pvc(
                            name, "vm-root", source="golden-%s" % VERIFY_FAMILY, storage_class="bench-none"
                        )
            except BaseException as exc:
                errors.append(exc)

        chunks = [list(range(start + n, total, threads)) for n in range(threads)]
        workers = [threading.Thread(target=work, args=(chunk,)) for chunk in chunks]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        if errors:
            raise errors[0]
        self.projects = total
        self.wait(self.all_bound, "project copies to bind", timeout=300)

    def all_bound(self):
        items = self.custom.list_cluster_custom_object(
            GROUP, VERSION, "volumesnapshots", label_selector="kube-dc.com/golden-os"
        )["items"]
        copies = [i for i in items if i["metadata"]["namespace"] not in (FS_NS, BLOCK_NS)]
        return len(copies) == self.projects * len(FAMILIES) and all(
            (i.get("status") or {}).get("readyToUse") for i in copies
        )


def _store_put(lab, group, version, plural, obj, status=None):
    """Create ``obj`` through the lab's API client, then write ``status`` through the status subresource;
    returns the object as the server holds it."""
    rt = lab.store.resource(group, version, plural)
    created = lab.store.create(rt, obj)
    if status is None:
        return created
    created["status"] = status
    return lab.store.update(rt, created, subresource="status")


def _store_content(lab, name, policy, source, ref, handle):
    """A VolumeSnapshotContent, bound to ``ref`` and ready with ``handle``."""
    return _store_put(
        lab,
        GROUP,
        VERSION,
        "volumesnapshotcontents",
        {
            "metadata": {"name": name},
            "spec": {"deletionPolicy": policy, "driver": DRIVER, "source": source, "volumeSnapshotRef": ref},
        },
        {"snapshotHandle": handle, "readyToUse": True, "restoreSize": 4194304},
    )


def store_goldens(lab):
    """In the lab's process: the goldens of ``arrange_goldens``, bound and ready, written to the store
    (no controller runs). Returns the layout ``store_projects`` needs: handles and names by family."""
    namespaces = lab.store.resource("", "v1", "namespaces")
    for ns in (FS_NS, BLOCK_NS):  # the lab makes Kube-DC's golden namespaces itself
        if not lab.store.exists(namespaces, None, ns):
            _store_put(lab, "", "v1", "namespaces", {"metadata": {"name": ns}})
    handles, goldens = {}, {}

    def put(namespace, name, family, active):
        mode = "Block" if namespace == BLOCK_NS else "Filesystem"
        labels = {"kube-dc.com/golden-os": family, "kube-dc.com/golden-mode": mode}
        if active:
            labels["kube-dc.com/golden-active"] = "true"
        content, handle = "snapcontent-%s-%s" % (namespace, name), "snap-%s-%s" % (namespace, name)
        _store_content(
            lab,
            content,
            "Delete",
            {"volumeHandle": "vol-%s" % name},
            {"name": name, "namespace": namespace},
            handle,
        )
        _store_put(
            lab,
            GROUP,
            VERSION,
            "volumesnapshots",
            {
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": labels,
                    "annotations": {
                        "kube-dc.com/os-family-id": family,
                        "kube-dc.com/os-name": family,
                        "kube-dc.com/golden-mode": mode,
                    },
                },
                "spec": {"source": {"persistentVolumeClaimName": "disk"}},
            },
            {"boundVolumeSnapshotContentName": content, "readyToUse": True, "restoreSize": "4Mi"},
        )
        return handle

    for family, (suffixes, active, selected) in FAMILIES.items():
        names = ["golden-%s-%s" % (family, s) for s in suffixes]
        goldens[family] = names
        for i, name in enumerate(names):
            handles[name] = put(FS_NS, name, family, i == active)
        if selected is not None:
            _store_put(
                lab,
                "kube-dc.com",
                "v1",
                "goldenimageselections",
                {
                    "metadata": {"name": "%s-filesystem" % family, "namespace": FS_NS},
                    "spec": {"family": family, "mode": "Filesystem", "snapshotName": names[selected]},
                },
            )
    put(BLOCK_NS, "golden-debian-12-20260828-f0dea74da9c5", "debian-12", True)
    return {"handles": handles, "goldens": goldens}


def store_projects(lab, layout, start, stop):
    """In the lab's process: projects ``start`` .. ``stop - 1`` in the layout of ``World.add_projects``
    (every family seeded, every 25th stale, every 10th with a claim restoring from its copy), bound,
    written through the API, projects in parallel."""
    goldens, handles = layout["goldens"], layout["handles"]

    def one(i):
        project = "proj-%04d" % i
        _store_put(
            lab, "", "v1", "namespaces", {"metadata": {"name": project, "labels": {PROJECT_LABEL: "bench"}}}
        )
        for family, (_, active, selected) in FAMILIES.items():
            index = selected if selected is not None else active if active is not None else 0
            served = goldens[family][0] if i % 25 == 0 and family == VERIFY_FAMILY else goldens[family][index]
            content, snap = "kdc-%s-%s-fs" % (project, family), "golden-%s" % family
            copy = _store_put(
                lab,
                GROUP,
                VERSION,
                "volumesnapshots",
                {
                    "metadata": {
                        "name": snap,
                        "namespace": project,
                        "labels": {"kube-dc.com/golden-os": family, "kube-dc.com/golden-mode": "Filesystem"},
                        "annotations": {
                            "kube-dc.com/clone-min-size": "4Mi",
                            "kube-dc.com/seeded-from": "%s/%s" % (FS_NS, served),
                        },
                    },
                    "spec": {"source": {"volumeSnapshotContentName": content}},
                },
                {"boundVolumeSnapshotContentName": content, "readyToUse": True, "restoreSize": "4Mi"},
            )
            # Bound back to its copy by uid, as the snapshot controller binds a pre-provisioned content.
            _store_content(
                lab,
                content,
                "Retain",
                {"snapshotHandle": handles[served]},
                {"name": snap, "namespace": project, "uid": copy["metadata"]["uid"]},
                handles[served],
            )
        if i % 10 == 0:
            _store_put(
                lab,
                "",
                "v1",
                "persistentvolumeclaims",
                {
                    "metadata": {"name": "vm-root", "namespace": project},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "volumeMode": "Filesystem",
                        "storageClassName": "bench-none",
                        "resources": {"requests": {"storage": "4Mi"}},
                        "dataSource": {
                            "apiGroup": GROUP,
                            "kind": "VolumeSnapshot",
                            "name": "golden-%s" % VERIFY_FAMILY,
                        },
                    },
                },
            )

    in_parallel(one, range(start, stop))


def api_span(lab):
    """Seconds from the first to the last request in the audit log."""
    times = [r["time"] for r in lab.audit()]
    return max(times) - min(times) if times else 0.0


def api_requests(lab):
    """(API requests by verb, discovery requests) since the last clear."""
    verbs = {}
    discovery = 0
    for record in lab.audit():
        if record["resource"]:
            verbs[record["verb"]] = verbs.get(record["verb"], 0) + 1
        else:
            discovery += 1
    return verbs, discovery


def measure(lab, fn, repeat):
    """(median seconds, API requests by verb of one run); the first run is timed too."""
    times = []
    verbs = None
    for _ in range(repeat):
        lab.clear_audit()
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
        if verbs is None:
            verbs = api_requests(lab)[0]
    return statistics.median(times), verbs


def adapter(kubeconfig):
    """The collection's own KubeModule with golden_info's options (raw JSON pages on the retry layer)."""
    from ansible.module_utils.testing import patch_module_args
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeModule

    with patch_module_args({"kubeconfig": str(kubeconfig)}):
        return KubeModule(argument_spec=golden_info.argument_spec(), supports_check_mode=True)


def module_run(module):
    """golden_info's runner as the module process runs it (lists, report, summary), without exit_json."""
    return golden_info.run(module)


CONTINUE = re.compile(rb'"continue":"([^"]+)"')


def floor_once(module, page):
    """The API server's share of a report: golden_info's LISTs sent by the module's own list (same
    pages, same connection, same retry layer) with each body read whole and never parsed; the continue
    token is taken from the list metadata, which is at one end of the body. What the module adds is
    its time minus this."""

    def unparsed(path, query, _keep):
        body = module._get_body(path, query)
        found = CONTINUE.search(body[-4096:]) or CONTINUE.search(body[:4096])
        return {"items": [], "metadata": {"continue": found.group(1).decode() if found else None}}

    module._get_page = unparsed
    try:
        for query in golden_inventory.observation_plan(golden_inventory.golden_namespaces()):
            if not query["optional"] or module.served(query["api"], query["kind"]):
                module.list(
                    query["api"],
                    query["kind"],
                    query["namespace"],
                    label_selector=query["selector"],
                    page=page,
                )
    finally:
        del module._get_page


def json_pages_run(module):
    """``module_run`` with every page parsed by the standard json module, as without msgspec."""
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import _listpage

    lean = _listpage._lean()
    _listpage._lean_pair = (None, None)
    try:
        return module_run(module)
    finally:
        _listpage._lean_pair = lean


def report_once(lister):
    observed = golden_info.observe(lister, golden_inventory.golden_namespaces())
    result = golden_inventory.report(
        observed["snapshots"],
        observed["contents"],
        observed["pvcs"],
        observed["projects"],
        observed["selections"],
        observed["datavolumes"],
    )
    return result


def verify_listed(lister, family, mode="Filesystem"):
    """golden_selection's verification: the served golden's handle, then every project, from lists."""
    goldens = lister.list("%s/%s" % (GROUP, VERSION), "VolumeSnapshot", FS_NS)
    contents = lister.list(selection.CONTENT_API_VERSION, selection.CONTENT_KIND)
    selections = lister.list(selection.SELECTION_API_VERSION, selection.SELECTION_KIND, FS_NS)
    served = selection.resolve_serving(goldens, selections, family, mode)["snapshot"]
    expected = selection.golden_handle(selection.find_golden(goldens, served, mode), contents)
    projects = [n["metadata"]["name"] for n in lister.list("v1", "Namespace", label_selector=PROJECT_LABEL)]
    copies = lister.list(
        "%s/%s" % (GROUP, VERSION),
        "VolumeSnapshot",
        label_selector=golden_inventory.snapshot_selector(family),
    )
    return selection.project_resolutions(projects, copies, contents, family, mode, expected)


def verify_naive(world, lister, family, mode="Filesystem"):
    """The same answer with one GET of the copy and one of its content per project."""
    from kubernetes.client.rest import ApiException

    goldens = lister.list("%s/%s" % (GROUP, VERSION), "VolumeSnapshot", FS_NS)
    selections = lister.list(selection.SELECTION_API_VERSION, selection.SELECTION_KIND, FS_NS)
    served = selection.resolve_serving(goldens, selections, family, mode)["snapshot"]
    expected = world.handles[served]
    projects = [n["metadata"]["name"] for n in lister.list("v1", "Namespace", label_selector=PROJECT_LABEL)]
    name = selection.project_snapshot_name(family, mode)
    out = []
    for project in sorted(projects):
        try:
            snap = world.snapshot(project, name)
        except ApiException:
            snap = None
        contents = []
        bound = ((snap or {}).get("status") or {}).get("boundVolumeSnapshotContentName")
        if bound:
            contents.append(
                world.custom.get_cluster_custom_object(GROUP, VERSION, "volumesnapshotcontents", bound)
            )
        out.append(selection.project_resolution(project, snap, contents, expected))
    return out


def run_module(lab, direct, collections=COLLECTIONS):
    """golden_info through ansible-playbook once: (seconds, API requests by verb, discovery, span, summary,
    peak MiB resident of the module's process)."""
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {"name": "report", "goldenimage.pipeline.golden_info": {}, "register": "info"},
                {"name": "summary", "ansible.builtin.debug": {"msg": "SUMMARY {{ info.summary | to_json }}"}},
            ],
        }
    ]
    lab.clear_audit()
    stdout, elapsed, _cpu, rss = playbook(play, env=lab.env(direct), collections=collections)
    verbs, discovery = api_requests(lab)
    span = api_span(lab)
    line = next(ln for ln in stdout.splitlines() if "SUMMARY" in ln)
    summary = json.loads(line.split("SUMMARY", 1)[1].strip().rstrip('"').replace('\\"', '"'))
    return elapsed, verbs, discovery, span, summary, rss


def total(verbs):
    return sum(verbs.values())


def fmt(verbs):
    return ", ".join("%s %d" % (k, v) for k, v in sorted(verbs.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--projects", default="50,500", help="comma-separated project counts, increasing")
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (median is shown)")
    parser.add_argument("--no-playbook", action="store_true", help="skip the ansible-playbook run")
    parser.add_argument(
        "--store",
        action="store_true",
        help="seed goldens and projects through the API, bound and ready, with no controller"
        " running (fleet sizes the API would take long to seed)",
    )
    parser.add_argument("--no-naive", action="store_true", help="skip the GET-each verification")
    add_direct_argument(parser)
    parser.add_argument(
        "--floor-pages",
        default="",
        help="comma-separated page sizes at which the API server floor is also measured (how the server's"
        " share depends on the page size)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a quick run: --store, 50 and 500 projects, once",
    )
    args = parser.parse_args()
    if args.smoke:
        args.store = args.no_naive = args.no_playbook = True
        args.projects, args.repeat = "50,500", 1
    steps = sorted(int(n) for n in args.projects.split(","))
    other_pages = [int(n) for n in args.floor_pages.split(",") if n]

    rows = []
    ratios = []
    listed_requests = {}
    floors = []
    with (
        tempfile.TemporaryDirectory() as state,
        LabProcess(
            state, controllers=None if args.store else "tests.lab.controllers.storage:CONTROLLERS"
        ) as lab,
    ):
        # --direct: every client talks to kube-apiserver itself, as on a cluster, not through the lab's front.
        kubeconfig = lab.direct_kubeconfig if args.direct else lab.kubeconfig
        world = World(lab, kubeconfig)
        started = time.perf_counter()
        if args.store:
            layout = lab.call("bench.golden_info:store_goldens")
            world.handles, world.goldens = layout["handles"], layout["goldens"]
        else:
            world.arrange_goldens()
        lister = Lister(world.api)
        module = adapter(kubeconfig)
        for each in (lister, module):  # discovery, once
            each.served(selection.SELECTION_API_VERSION, selection.SELECTION_KIND)
        for count in steps:
            if args.store:
                lab.call("bench.golden_info:store_projects", layout, world.projects, count)
                world.projects = count
            else:
                world.add_projects(count)
            print("... %d projects seeded (%s)" % (count, load()), file=sys.stderr, flush=True)
            result = report_once(module)
            summary = golden_inventory.summary(result)
            expected_stale = len(range(0, count, 25))
            stale = [
                p
                for p in result["projects"]
                if (p["family"], p["mode"]) == (VERIFY_FAMILY, "Filesystem") and not p["match"]
            ]
            if len(stale) != expected_stale:
                print(
                    "FAIL: %d stale projects reported, %d made" % (len(stale), expected_stale),
                    file=sys.stderr,
                )
                return 1
            same = "same report" if report_once(lister) == result else "DIFFERENT report"
            if same != "same report":
                print("FAIL: the baseline and the adapter report differently", file=sys.stderr)
                return 1
            # Paired: the arms alternate, so a load swing hits each of them.
            old_t, new_t, new_cpu, lab_cpu, floor_t, other_t = [], [], [], [], [], {}
            json_t, json_cpu = [], []
            server_cpu, floor_cpu, floor_server = [], [], []
            old_verbs = new_verbs = None
            for run in range(args.repeat):
                # The arm that follows the dynamic client (the costliest for the server) rotates.
                for arm in ["baseline"] + ARMS[run % len(ARMS) :] + ARMS[: run % len(ARMS)]:
                    cpu_before, lab_before, server_before = time.process_time(), lab.cpu(), lab.server_cpu()
                    if arm == "baseline":
                        seconds, verbs = measure(lab, lambda: report_once(lister), 1)
                        old_t.append(seconds)
                        old_verbs = old_verbs or verbs
                    elif arm == "adapter":
                        seconds, verbs = measure(lab, lambda: module_run(module), 1)
                        new_cpu.append(time.process_time() - cpu_before)
                        lab_cpu.append(lab.cpu() - lab_before)
                        server_cpu.append(lab.server_cpu() - server_before)
                        new_t.append(seconds)
                        new_verbs = new_verbs or verbs
                    elif arm == "json":
                        json_t.append(measure(lab, lambda: json_pages_run(module), 1)[0])
                        json_cpu.append(time.process_time() - cpu_before)
                    else:
                        floor_t.append(measure(lab, lambda: floor_once(module, _kube_page()), 1)[0])
                        floor_cpu.append(time.process_time() - cpu_before)
                        floor_server.append(lab.server_cpu() - server_before)
                for page in other_pages:
                    other_t.setdefault(page, []).append(measure(lab, lambda p=page: floor_once(module, p), 1))
            old_s, new_s = statistics.median(old_t), statistics.median(new_t)
            cpu_s, lab_s = statistics.median(new_cpu), statistics.median(lab_cpu)
            server_s = statistics.median(server_cpu)
            floor_s = statistics.median(floor_t)
            rows.append(("golden_info, baseline (dynamic client)", count, old_verbs, old_s, same))
            rows.append(
                (
                    "golden_info, adapter (raw pages)",
                    count,
                    new_verbs,
                    new_s,
                    "%d entries; old/new %.2f; cpu %.3fs here, %.3fs in the lab, %.3fs in its servers"
                    % (summary["project_entries"], old_s / new_s, cpu_s, lab_s, server_s),
                )
            )
            json_cpu_s = statistics.median(json_cpu)
            rows.append(
                (
                    "  the same, pages parsed by json",
                    count,
                    new_verbs,
                    statistics.median(json_t),
                    "cpu %.3fs here; msgspec pages take %.2fx its cpu" % (json_cpu_s, cpu_s / json_cpu_s),
                )
            )
            rows.append(
                (
                    "API server floor (pages read, not parsed)",
                    count,
                    new_verbs,
                    floor_s,
                    "the module's own share %.3fs; cpu %.3fs here (reading), %.3fs in the lab's servers"
                    % (new_s - floor_s, statistics.median(floor_cpu), statistics.median(floor_server)),
                )
            )
            for page, runs in sorted(other_t.items()):
                rows.append(
                    (
                        "API server floor, pages of %d" % page,
                        count,
                        runs[0][1],
                        statistics.median(seconds for seconds, _ in runs),
                        "against %.3fs with pages of %d" % (floor_s, _kube_page()),
                    )
                )
            ratios.append((count, old_s, new_s, cpu_s, lab_s, server_s))
            floors.append((count, floor_s, new_s))
            print(
                "... %d projects: old %.3fs, new %.3fs (%s)" % (count, old_s, new_s, load()), file=sys.stderr
            )
            listed_requests.setdefault("golden_info (baseline, one request a list)", []).append(
                total(old_verbs)
            )

            seconds, verbs = measure(lab, lambda: verify_listed(module, VERIFY_FAMILY), args.repeat)
            found = verify_listed(module, VERIFY_FAMILY)
            rows.append(
                (
                    "verify projects, listed",
                    count,
                    verbs,
                    seconds,
                    "%d not matching" % len(selection.unresolved(found)),
                )
            )

            if args.no_naive:
                continue
            seconds, verbs = measure(lab, lambda: verify_naive(world, lister, VERIFY_FAMILY), 1)
            found = verify_naive(world, lister, VERIFY_FAMILY)
            rows.append(
                (
                    "verify projects, GET each",
                    count,
                    verbs,
                    seconds,
                    "%d not matching" % len(selection.unresolved(found)),
                )
            )
        if not args.no_playbook:
            # The whole task, and the same task on the adapter that kept managedFields (peak memory).
            with tempfile.TemporaryDirectory() as old_tree:
                kept = baseline_collections(KEEPS_MANAGED_FIELDS, [ADAPTER], old_tree)
                for what, tree in (
                    ("golden_info (ansible-playbook)", COLLECTIONS),
                    ("  the same, managedFields kept", kept),
                ):
                    seconds, verbs, discovery, span, summary, rss = run_module(lab, args.direct, tree)
                    rows.append(
                        (
                            what,
                            steps[-1],
                            verbs,
                            seconds,
                            "+%d discovery; requests span %.3fs; %d entries, %d clones; peak %.0f MiB"
                            " resident"
                            % (discovery, span, summary["project_entries"], summary["clones"], rss),
                        )
                    )
        setup = time.perf_counter() - started

    print(
        "%-40s %8s %9s %9s  %-36s %s"
        % ("what", "projects", "requests", "seconds", "requests by verb", "result")
    )
    for what, count, verbs, seconds, note in rows:
        print("%-40s %8d %9d %9.3f  %-36s %s" % (what, count, total(verbs), seconds, fmt(verbs), note))
    for (c0, o0, n0, p0, l0, _), (c1, o1, n1, p1, l1, _) in itertools.pairwise(ratios):
        print(
            "growth %d -> %d projects (%.1fx): adapter %.2fx time (%.2fx cpu here, %.2fx cpu in the lab),"
            " baseline %.2fx time" % (c0, c1, c1 / c0, n1 / n0, p1 / p0, l1 / max(l0, 1e-3), o1 / o0)
        )
    for line in golden_info_lines([(count, old_s, new_s) for count, old_s, new_s, _, _, _ in ratios]):
        print(line)
    for line in golden_info_cpu_lines(
        [(count, cpu_s, server_s) for count, _, _, cpu_s, _, server_s in ratios]
    ):
        print(line)
    for line in floor_lines("golden_info", "projects", floors):
        print(line)
    print(
        "(setup and all runs: %.1fs; in-process figures: medians of %d paired runs; the lab runs in its own"
        " process; adapter pages hold %d objects; %s)" % (setup, args.repeat, _kube_page(), load())
    )
    for what, counts in listed_requests.items():
        if len(set(counts)) != 1:
            print("FAIL: %s sent %s requests at %s projects" % (what, counts, steps), file=sys.stderr)
            return 1
    return 0


def _kube_page():
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import _kube

    return _kube.LIST_PAGE


if __name__ == "__main__":
    sys.exit(main())
