"""The lab: a real kube-apiserver and etcd on 127.0.0.1 with simulated controllers and a loopback S3 server.

    lab = Lab(tmp_path).start()
    ...  # point the kubernetes client, kubernetes.core or our modules at lab.kubeconfig
    lab.stop()

See tests/lab/README.md; apiserver.py starts the upstream processes (``lab.kubeconfig`` points at
kube-apiserver), front.py is the lab's listener (the fault proxy ``lab.fault_kubeconfig`` points at, and
the servers beside the API server: KubeVirt's subresources, the kubelet's logs, Harvester's upload),
apistore.py is the controllers' API client.
"""

from __future__ import annotations

import base64
import contextlib
import os
import pathlib
import shutil
import weakref

import yaml

from .access import Tokens
from .faults import Faults
from .objects import ResourceType

DEFAULT_SC_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
DEFAULT_VSC_ANNOTATION = "snapshot.storage.kubernetes.io/is-default-class"
KUBEVIRT_NAMESPACE = "kubevirt"
PORT_ATTEMPTS = 3
POD_SECURITY_ENFORCE = "pod-security.kubernetes.io/enforce"
KUBEVIRT_VERSION = "v1.8.2"  # before ExpandDisks went GA (v1.9.0): the feature gate decides
# The KubeVirt CR's feature gates; KubeVirt's admission (below) reads the same ones.
KUBEVIRT_FEATURE_GATES = ["ExpandDisks", "Snapshot"]
# Who validates VirtualMachines and VMIs: "upstream" is KubeVirt v1.6.0's own admitters
# (tools/kubevirt-admission, a child process behind a ValidatingWebhookConfiguration); "off" is none.
KUBEVIRT_ADMISSIONS = ("upstream", "off")
# The labs of this process that run (fixtures.py checks that a fault knob a test arms meets a request).
RUNNING: weakref.WeakSet = weakref.WeakSet()


class Lab:
    def __init__(
        self,
        state_dir: pathlib.Path | str,
        port: int = 0,
        with_s3: bool = True,
        dbinstance_group: str | None = None,
        dbinstance_version: str | None = None,
        controllers: list | None = None,
        seed: int | None = None,
        kube_controllers: bool = True,
        kubedc_resync: float | None = None,
        kubevirt_admission: str | None = None,
    ):
        self.state_dir = pathlib.Path(state_dir).resolve()
        self.port = port
        self.with_s3 = with_s3
        self.dbinstance_group = dbinstance_group or os.environ.get("LAB_DBINSTANCE_GROUP") or None
        self.dbinstance_version = dbinstance_version or os.environ.get("LAB_DBINSTANCE_VERSION") or None
        self._controller_classes = controllers
        # The upstream controllers: kube-controller-manager (namespace finalization, garbage collection, a
        # ServiceAccount and a kube-root-ca.crt ConfigMap in every namespace) and external-snapshotter's
        # snapshot controller. A bench that deletes nothing runs without them, so nothing is still being
        # written about the objects it seeded while it measures.
        self.kube_controllers = kube_controllers
        # Kube-DC's seeder resync in seconds (None: LAB_KUBEDC_RESYNC_SECONDS, else 15 min, the platform's).
        from .controllers.kubedc import resync_interval

        self.kubedc_resync = resync_interval(kubedc_resync)  # a bad value is refused before anything starts
        self.kubevirt_admission = kubevirt_admission or os.environ.get("LAB_KUBEVIRT_ADMISSION") or "upstream"
        if self.kubevirt_admission not in KUBEVIRT_ADMISSIONS:
            raise ValueError(
                "kubevirt_admission %r: use one of %s (or LAB_KUBEVIRT_ADMISSION)"
                % (self.kubevirt_admission, ", ".join(KUBEVIRT_ADMISSIONS))
            )
        self.store = None  # an ApiStore once started
        self.faults = Faults(seed=seed)
        self.tokens = Tokens()
        self.admin_token = self.tokens.admin_token
        self.kubeconfig = self.state_dir / "kubeconfig"  # kube-apiserver's own address
        self.fault_kubeconfig = self.state_dir / "kubeconfig-faults"  # through the fault proxy
        self._env_faults = 0  # through_faults() blocks open
        self.s3_env_file = self.state_dir / "s3.env"
        self.s3 = None
        self.server = None
        self.controller_manager = None
        self._s3_server = None
        self._ca_path: pathlib.Path | None = None
        self.apiserver = None
        self.is_lab = True

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> Lab:
        from .controllers import ControllerManager, LabContext, default_controllers

        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / "volumes").mkdir(exist_ok=True)
        try:
            self._start_apiserver()
            if self.with_s3:
                from .s3 import S3Server

                self._s3_server = S3Server()
                self.s3 = self._s3_server.start()
            self.port = self.server.port
            lab_context = LabContext(
                store=self.store,
                state_dir=self.state_dir,
                faults=self.faults,
                kubedc_resync_seconds=self.kubedc_resync,
            )
            classes = (
                self._controller_classes if self._controller_classes is not None else default_controllers()
            )
            self.controller_manager = ControllerManager(lab_context, classes)
            self.apiserver.register_admission(self.store)
            self._register_platform_endpoints()
            self.controller_manager.start()
            self.write_kubeconfig(self.kubeconfig)
            self.write_kubeconfig(self.fault_kubeconfig, faults=True)
            self._write_s3_env()
        except BaseException:
            self.stop()
            raise
        RUNNING.add(self)
        return self

    def stop(self) -> None:
        RUNNING.discard(self)
        if self.controller_manager is not None:
            self.controller_manager.stop()
            self.controller_manager = None
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self._s3_server is not None:
            self._s3_server.stop()
            self._s3_server = None
        if self.apiserver is not None:
            if self.store is not None:
                self.store.close()
            self.apiserver.stop()
            self.apiserver = None

    def __enter__(self) -> Lab:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---------------------------------------------------------------- bootstrap
    def _start_apiserver(self) -> None:
        """kube-apiserver, etcd and kube-controller-manager, the lab's listener beside them, then the
        fixtures."""
        from .apiserver import ApiServer
        from .tls import make_certificate

        self._ca_path, key_path = make_certificate(self.state_dir)
        for attempt in range(1, PORT_ATTEMPTS + 1):
            self.apiserver = ApiServer(
                self.state_dir, self.tokens, self.faults, self._ca_path, key_path, port=self.port
            )
            try:
                if self.kubevirt_admission == "upstream":
                    self.apiserver.start_kubevirt_admission(KUBEVIRT_FEATURE_GATES)
                self.apiserver.start()
                break
            except RuntimeError as exc:
                # A free port can be taken by another process before etcd or the API server binds it.
                if "address already in use" not in str(exc) or attempt == PORT_ATTEMPTS:
                    raise
                if self.apiserver.store is not None:
                    self.apiserver.store.close()
                self.apiserver.stop()
                shutil.rmtree(self.apiserver.dir, ignore_errors=True)
        self.store = self.apiserver.store
        self.server = self.apiserver.front
        self._apply_crds()
        # A CRD is served only once it is Established; the VolumeSnapshotClass below needs its CRD.
        self.apiserver.wait_for_crds(self.store)
        if self.kube_controllers:
            self.apiserver.start_controller_manager()
            self.apiserver.start_snapshot_controller()
        if self.kubevirt_admission == "upstream":
            self.apiserver.register_kubevirt_admission(self.store)
        self._apply_fixtures()

    def _register_platform_endpoints(self) -> None:
        """The lab's Node (its kubelet endpoint serves pod logs) and, when the lab's virt-api serves
        screenshots (controllers/console.py), KubeVirt's APIService, both on the lab's listener."""
        from .controllers.console import GROUP_VERSION
        from .controllers.pods import NODE_NAME
        from .extensions import route_for

        aggregated = route_for(self.store, GROUP_VERSION) is not None
        self.apiserver.register_platform_endpoints(self.store, NODE_NAME, aggregated=aggregated)

    def _apply_crds(self) -> None:
        from .crdload import load_crds

        crd_rt = self.store.resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        db_api = {}
        if self.dbinstance_group:
            db_api["dbinstance_group"] = self.dbinstance_group
        if self.dbinstance_version:
            db_api["dbinstance_version"] = self.dbinstance_version
        for crd in load_crds(**db_api):
            self.apply(crd_rt, crd)

    def _apply_fixtures(self) -> None:
        """The StorageClasses and the default VolumeSnapshotClass every lab starts with."""
        from .controllers.volumes import HOSTPATH_CSI_DRIVER, RBD_CSI_DRIVER

        sc_rt = self.store.resource("storage.k8s.io", "v1", "storageclasses")
        for name, binding, default in (
            ("lab-fs", "Immediate", True),
            ("lab-wffc", "WaitForFirstConsumer", False),
            ("lab-rbd", "Immediate", False),
        ):
            annotations = {DEFAULT_SC_ANNOTATION: "true"} if default else {}
            # CSI provisioners, named after their drivers (the snapshot controller snapshots only CSI volumes)
            provisioner = RBD_CSI_DRIVER if name == "lab-rbd" else HOSTPATH_CSI_DRIVER
            storage_class = {
                "metadata": {"name": name, "annotations": annotations},
                "provisioner": provisioner,
                "reclaimPolicy": "Delete",
                "volumeBindingMode": binding,
                "allowVolumeExpansion": True,
            }
            self.apply(sc_rt, storage_class)
        vsc_rt = self.store.resource("snapshot.storage.k8s.io", "v1", "volumesnapshotclasses")
        # The snapshot controller picks a default class by the volume's CSI driver: one per driver.
        drivers = (("lab-snap", HOSTPATH_CSI_DRIVER), ("lab-snap-rbd", RBD_CSI_DRIVER))
        for name, driver in drivers:
            snapshot_class = {
                "metadata": {"name": name, "annotations": {DEFAULT_VSC_ANNOTATION: "true"}},
                "driver": driver,
                "deletionPolicy": "Delete",
            }
            self.apply(vsc_rt, snapshot_class)
        self._apply_kubevirt()
        self._apply_golden_namespaces()

    def _apply_golden_namespaces(self) -> None:
        """Kube-DC's golden namespaces, enforcing the baseline Pod Security level as its Flux tree has
        them: the API server's PodSecurity admission refuses a virt-launcher pod there."""
        from .controllers.kubedc import GOLDEN_NAMESPACES

        ns_rt = self.store.resource("", "v1", "namespaces")
        for name in GOLDEN_NAMESPACES.values():
            if not self.store.exists(ns_rt, None, name):
                labels = {POD_SECURITY_ENFORCE: "baseline"}
                self.store.create(ns_rt, {"metadata": {"name": name, "labels": labels}})

    def _apply_kubevirt(self) -> None:
        """The KubeVirt CR of a cluster that grows disks: `ExpandDisks` on, as the operator guide has it."""
        ns_rt = self.store.resource("", "v1", "namespaces")
        if not self.store.exists(ns_rt, None, KUBEVIRT_NAMESPACE):
            self.store.create(ns_rt, {"metadata": {"name": KUBEVIRT_NAMESPACE}})
        kv_rt = self.store.resource("kubevirt.io", "v1", "kubevirts")
        kubevirt = self.apply(
            kv_rt,
            {
                "metadata": {"name": "kubevirt", "namespace": KUBEVIRT_NAMESPACE},
                "spec": {
                    "configuration": {
                        "developerConfiguration": {"featureGates": list(KUBEVIRT_FEATURE_GATES)}
                    }
                },
            },
        )
        kubevirt["status"] = {"phase": "Deployed", "observedKubeVirtVersion": KUBEVIRT_VERSION}
        self.store.update(kv_rt, kubevirt, subresource="status")

    def apply(self, rt: ResourceType, obj: dict) -> dict:
        """Create the object, or replace the existing one with the same name."""
        meta = obj.get("metadata") or {}
        if self.store.exists(rt, meta.get("namespace"), meta["name"]):
            current = self.store.get(rt, meta.get("namespace"), meta["name"])
            return self.store.update(rt, dict(obj, metadata=dict(current["metadata"], **meta)))
        return self.store.create(rt, obj)

    # ----------------------------------------------------------------- access
    @property
    def url(self) -> str:
        """kube-apiserver's address: the server of ``kubeconfig``."""
        if self.apiserver is None:
            raise RuntimeError("the lab is not running")
        return self.apiserver.url

    @property
    def front_url(self) -> str:
        """The lab's listener: the fault proxy (``fault_kubeconfig``) and the lab's control endpoints."""
        if self.server is None:
            raise RuntimeError("the lab is not running")
        return self.server.url

    @property
    def harvester_url(self) -> str:
        """Harvester's API (the upload action), a server of its own as on Harvester: baked_image's and
        harvester_upload's ``harvester_url``."""
        return self.front_url

    @property
    def ca_path(self) -> pathlib.Path | None:
        """The CA of the lab's serving certificate (None before the lab starts)."""
        return self._ca_path

    def ssl_context(self):
        """An SSL context that trusts the lab's certificate."""
        import ssl

        return ssl.create_default_context(cafile=str(self._ca_path))

    def connection(self, timeout: float = 10, faults: bool = False):
        """A raw HTTPS connection to kube-apiserver (or, with ``faults``, to the fault proxy)."""
        import http.client
        from urllib.parse import urlsplit

        url = urlsplit(self.front_url if faults else self.url)
        context = self.ssl_context()
        return http.client.HTTPSConnection(url.hostname, url.port, timeout=timeout, context=context)

    def add_token(self, user: str, rules: list[dict]) -> str:
        """A token for `user` allowed only what `rules` (verbs, groups, resources, namespaces) allow.

        On the real API server the token is authenticated by the lab's token webhook and the rules
        become ClusterRoles/Roles bound to the user: RBAC decides, not the lab.
        """
        token = self.tokens.add(user, rules)
        if self.apiserver is not None:
            self.apiserver.grant(self.store, user, rules)
        return token

    def write_kubeconfig(
        self,
        path: pathlib.Path | str,
        token: str | None = None,
        user: str = "lab-admin",
        faults: bool = False,
    ) -> pathlib.Path:
        """A kubeconfig for ``user``: kube-apiserver's own address, or with ``faults`` the fault proxy
        (the only path the fault knobs act on)."""
        path = pathlib.Path(path)
        ca = base64.b64encode(self._ca_path.read_bytes()).decode()
        cluster = {"server": self.front_url if faults else self.url, "certificate-authority-data": ca}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "lab", "cluster": cluster}],
            "users": [{"name": user, "user": {"token": token or self.admin_token}}],
            "contexts": [
                {"name": "lab", "context": {"cluster": "lab", "user": user, "namespace": "default"}}
            ],
            "current-context": "lab",
            "preferences": {},
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path

    def _write_s3_env(self) -> None:
        if self.s3 is None:
            self.s3_env_file.unlink(missing_ok=True)
            return
        self.s3_env_file.write_text("".join(f"{k}={v}\n" for k, v in self.s3.env().items()))

    def env(self, faults: bool | None = None) -> dict[str, str]:
        """Environment for subprocesses (ansible-playbook, molecule) that should talk to this lab; with
        ``faults`` (by default: inside ``through_faults()``) their requests go through the fault proxy."""
        if faults is None:
            faults = self._env_faults > 0
        kubeconfig = str(self.fault_kubeconfig if faults else self.kubeconfig)
        env = {"K8S_AUTH_KUBECONFIG": kubeconfig, "KUBECONFIG": kubeconfig}
        if self.s3 is not None:
            env.update(self.s3.env())
        return env

    @contextlib.contextmanager
    def through_faults(self):
        """Within the block ``env()`` names the fault proxy's kubeconfig: for helpers that build their
        playbook's environment themselves, run under fault knobs."""
        self._env_faults += 1
        try:
            yield self
        finally:
            self._env_faults -= 1

    def fault_use(self) -> tuple[int, int]:
        """``(times a request knob was armed, API requests through the fault proxy)`` so far."""
        return self.faults.armed, self.server.forwarded if self.server is not None else 0

    def hold(self, keys: list[str], fault: str = "stuck") -> None:
        """Set an object fault on each key and return once no reconcile that began before is running."""
        for key in keys:
            self.faults.set_object(key, fault)
        if self.controller_manager is not None:
            self.controller_manager.settle()

    def wait_writes(self, quiet: float = 0.5, timeout: float = 60.0) -> None:
        """Return once kube-apiserver (and the fault proxy) has no write in flight and none began or
        ended for `quiet` seconds."""
        if self.apiserver is not None:
            self.apiserver.wait_writes(quiet, timeout)

    # ------------------------------------------------------------------ audit
    def audit(self) -> list[dict]:
        return self.apiserver.audit_records() if self.apiserver is not None else []

    def clear_audit(self) -> None:
        if self.apiserver is not None:
            self.apiserver.clear_audit()

    def mutating_requests(self) -> list[dict]:
        """Audit records of requests that changed (or would have changed, without dry-run) state."""
        from .access import MUTATING_VERBS

        return [r for r in self.audit() if r["verb"] in MUTATING_VERBS and not r["dry_run"]]


__all__ = ["Lab"]
