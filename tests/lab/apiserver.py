"""etcd, kube-apiserver and kube-controller-manager, built from their Go modules, on loopback.

The binaries come from tools/build-apiserver.sh (cached outside the work tree). The API server serves
HTTPS on a random port with a self-signed certificate, authenticates a static token file (the lab's
admin is in system:masters) and ServiceAccount tokens, authorizes with RBAC, and writes its audit log as
JSON lines into the state directory. kube-controller-manager runs only the controllers the lab relies
on from a cluster: namespace finalization, owner-reference garbage collection and ServiceAccounts.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
import secrets
import socket
import ssl
import subprocess
import time
import urllib.request

import yaml

from .lifetime import tied

BUILD_SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "tools" / "build-apiserver.sh"
SNAPSHOT_CONTROLLER_SCRIPT = BUILD_SCRIPT.with_name("build-snapshot-controller.sh")
KUBEVIRT_ADMISSION_SCRIPT = BUILD_SCRIPT.with_name("build-kubevirt-admission.sh")
# The snapshot controller's periods, shortened for tests (upstream: a 15 min resync, retries backing off to
# 5 min). Readiness does not wait for the resync: a content turning ready requeues its VolumeSnapshot.
SNAPSHOT_RESYNC = "5s"
SNAPSHOT_RETRY_MAX = "5s"
# The kube-controller-manager controllers the lab runs: namespace finalization, owner-reference garbage
# collection, ServiceAccounts and the kube-root-ca.crt ConfigMap every Pod's kube-api-access volume
# projects, and the PVC/PV protection controllers that remove the kubernetes.io/pvc-protection and
# pv-protection finalizers the API server's admission adds (without them a deleted claim stays
# Terminating forever).
KCM_CONTROLLERS = (
    "namespace,garbagecollector,serviceaccount,root-ca-cert-publisher,pvc-protection,pv-protection"
)
MUTATING = ["create", "update", "patch", "delete", "deletecollection"]
# Writes are also logged when received, so a write still in flight is seen (ApiServer.wait_writes).
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["ResponseStarted"],
    "rules": [
        {"level": "Metadata", "verbs": MUTATING},
        {"level": "Metadata", "omitStages": ["RequestReceived"]},
    ],
}


STOP_GRACE_SECONDS = 3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def binaries() -> pathlib.Path:
    """The directory holding kube-apiserver, etcd and kube-controller-manager (built when missing)."""
    return built_dir(BUILD_SCRIPT, "LAB_APISERVER_BIN")


def built_dir(script: pathlib.Path, override_variable: str) -> pathlib.Path:
    """The directory a tools/build-*.sh script prints last (it builds when the cache misses), or the
    one the environment variable names."""
    override = os.environ.get(override_variable)
    if override:
        return pathlib.Path(override)
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError("tools/%s failed:\n%s" % (script.name, proc.stderr[-4000:]))
    return pathlib.Path(proc.stdout.strip().splitlines()[-1])


def _service_account_key(path: pathlib.Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    path.chmod(0o600)


class ApiServer:
    """The three processes, the lab's listener beside them and the files they share (``<state>/apiserver``).

    Tokens: the admin and the controllers are static (a token file; both in system:masters); tokens the
    tests add (``Lab.add_token``) are authenticated by the front's token webhook and authorized by RBAC
    objects this class writes. The controllers' own requests are left out of ``audit_records``: the
    audit log is what clients of the lab did.
    """

    CONTROLLER_USER = "lab-controllers"
    # A system user: left out of the audit like the other controllers.
    SNAPSHOT_CONTROLLER_USER = "system:snapshot-controller"

    def __init__(
        self, state_dir, tokens, faults, ca_path: pathlib.Path, key_path: pathlib.Path, port: int = 0
    ):
        self.dir = pathlib.Path(state_dir) / "apiserver"
        self.tokens = tokens
        self.faults = faults
        self.admin_token = tokens.admin_token
        self.controller_token = new_token()
        self.kcm_token = new_token()
        self.snapshot_token = new_token()
        self.ca_path = ca_path
        self.key_path = key_path
        self.front_port = port
        self.port = 0
        self.audit_path = self.dir / "audit.log"
        self._audit_offset = 0
        self._procs: list[tuple[str, subprocess.Popen]] = []
        self.store = None
        self.front = None
        self.bin_dir = None
        self.kubevirt_admission_url = None

    @property
    def url(self) -> str:
        return "https://127.0.0.1:%d" % self.port

    def _client_certificates(self) -> dict[str, pathlib.Path]:
        """The aggregator's front-proxy CA and client certificate, and the kubelet client certificate
        kube-apiserver presents to the lab's kubelet endpoint (tls.py)."""
        from .tls import FRONT_PROXY_CLIENT, KUBELET_CLIENT, issue_client_certificate, make_front_proxy_ca

        front_proxy_ca = make_front_proxy_ca(self.dir)
        proxy_cert, proxy_key = issue_client_certificate(
            front_proxy_ca, self.dir, "front-proxy-client", FRONT_PROXY_CLIENT
        )
        kubelet_cert, kubelet_key = issue_client_certificate(
            (self.ca_path, self.key_path), self.dir, "apiserver-kubelet-client", KUBELET_CLIENT
        )
        return {
            "front_proxy_ca": front_proxy_ca[0],
            "proxy_cert": proxy_cert,
            "proxy_key": proxy_key,
            "kubelet_cert": kubelet_cert,
            "kubelet_key": kubelet_key,
        }

    def start(self, timeout: float = 90.0) -> ApiServer:
        from .apistore import ApiStore
        from .front import FrontServer
        from .tls import FRONT_PROXY_CLIENT, listener_context

        self.bin_dir = bin_dir = binaries()
        self.dir.mkdir(parents=True, exist_ok=True)
        certs = self._client_certificates()
        etcd_port, peer_port, self.port = free_port(), free_port(), free_port()
        self.store = ApiStore("https://127.0.0.1:%d" % self.port, self.controller_token, self.ca_path)
        self.front = FrontServer(
            self.store,
            self.faults,
            self.port,
            self.ca_path,
            listener_context(self.ca_path, self.key_path, [self.ca_path, certs["front_proxy_ca"]]),
            self.authenticate,
            self.audit_records,
            self.clear_audit,
            port=self.front_port,
            tokens=self.tokens,
        ).start()
        sa_key = self.dir / "sa.key"
        _service_account_key(sa_key)
        tokens = self.dir / "tokens.csv"
        # kube-controller-manager has an identity of its own, so its requests (namespace cleanup lists
        # every kind) are not mistaken for a client's in the audit.
        tokens.write_text(
            '%s,lab-admin,lab-admin-uid,"system:masters"\n'
            '%s,%s,lab-controllers-uid,"system:masters"\n'
            '%s,system:kube-controller-manager,kcm-uid,"system:masters"\n'
            '%s,%s,snapshot-controller-uid,"system:masters"\n'
            % (
                self.admin_token,
                self.controller_token,
                self.CONTROLLER_USER,
                self.kcm_token,
                self.snapshot_token,
                self.SNAPSHOT_CONTROLLER_USER,
            )
        )
        tokens.chmod(0o600)
        webhook = self.write_kubeconfig(
            self.dir / "authn-webhook.kubeconfig", server=self.front.url + "/lab/authenticate"
        )
        policy = self.dir / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(AUDIT_POLICY))
        self.audit_path.write_text("")
        self._spawn(
            "etcd",
            [
                str(bin_dir / "etcd"),
                "--data-dir=%s" % (self.dir / "etcd"),
                "--listen-client-urls=http://127.0.0.1:%d" % etcd_port,
                "--advertise-client-urls=http://127.0.0.1:%d" % etcd_port,
                "--listen-peer-urls=http://127.0.0.1:%d" % peer_port,
                "--initial-advertise-peer-urls=http://127.0.0.1:%d" % peer_port,
                "--initial-cluster=default=http://127.0.0.1:%d" % peer_port,
                "--unsafe-no-fsync",  # a throwaway store: durability would only cost time
                "--quota-backend-bytes=%d" % (4 << 30),
                "--log-level=warn",
            ],
        )
        self._spawn(
            "kube-apiserver",
            [
                str(bin_dir / "kube-apiserver"),
                "--etcd-servers=http://127.0.0.1:%d" % etcd_port,
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                "--secure-port=%d" % self.port,
                "--tls-cert-file=%s" % self.ca_path,
                "--tls-private-key-file=%s" % self.key_path,
                "--client-ca-file=%s" % self.ca_path,
                "--token-auth-file=%s" % tokens,
                "--authentication-token-webhook-config-file=%s" % webhook,
                "--authentication-token-webhook-cache-ttl=1s",
                "--authentication-token-webhook-version=v1",
                "--anonymous-auth=false",  # a request without a valid token is 401, as the lab promises
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--service-account-key-file=%s" % sa_key,
                "--service-account-signing-key-file=%s" % sa_key,
                "--service-cluster-ip-range=10.96.0.0/24",
                "--audit-policy-file=%s" % policy,
                "--audit-log-path=%s" % self.audit_path,
                "--audit-log-format=json",
                "--audit-log-mode=blocking",
                "--audit-log-maxsize=0",
                # The aggregation layer (KubeVirt's subresources.kubevirt.io APIService) and the kubelet
                # client (pod logs), as a kubeadm cluster configures them; both reach the lab's listener.
                "--requestheader-client-ca-file=%s" % certs["front_proxy_ca"],
                "--requestheader-allowed-names=%s" % FRONT_PROXY_CLIENT,
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                "--proxy-client-cert-file=%s" % certs["proxy_cert"],
                "--proxy-client-key-file=%s" % certs["proxy_key"],
                "--kubelet-client-certificate=%s" % certs["kubelet_cert"],
                "--kubelet-client-key=%s" % certs["kubelet_key"],
                "--kubelet-certificate-authority=%s" % self.ca_path,
                "--kubelet-preferred-address-types=InternalIP",
                "--enable-priority-and-fairness=false",
                "--max-requests-inflight=2000",
                "--max-mutating-requests-inflight=1000",
                "--watch-cache=true",
                "--v=0",
            ],
        )
        self._wait_ready(timeout)
        return self

    def start_controller_manager(self) -> None:
        """kube-controller-manager, started once the lab's CRDs are established.

        Its garbage collector watches only the resources discovery showed it at start and finds new
        ones at a 30 s resync; started before the CRDs, owned custom objects would wait that long.
        """
        kubeconfig = self.write_kubeconfig(self.dir / "kcm.kubeconfig", token=self.kcm_token)
        self._spawn(
            "kube-controller-manager",
            [
                str(self.bin_dir / "kube-controller-manager"),
                "--kubeconfig=%s" % kubeconfig,
                "--authentication-kubeconfig=%s" % kubeconfig,
                "--authorization-kubeconfig=%s" % kubeconfig,
                "--controllers=%s" % KCM_CONTROLLERS,
                "--root-ca-file=%s" % self.ca_path,
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                "--secure-port=%d" % free_port(),
                "--concurrent-gc-syncs=5",
                "--concurrent-namespace-syncs=5",
                "--v=0",
            ],
        )

    def start_snapshot_controller(self) -> None:
        """The CSI snapshot controller (external-snapshotter's cmd/snapshot-controller), once the
        snapshot CRDs are served: binding, readiness, deletion and finalizers of VolumeSnapshots and
        their contents are its own. The driver side it waits on is controllers/snapshots.py."""
        binary = built_dir(SNAPSHOT_CONTROLLER_SCRIPT, "LAB_SNAPSHOT_CONTROLLER_BIN") / "snapshot-controller"
        kubeconfig = self.write_kubeconfig(
            self.dir / "snapshot-controller.kubeconfig", token=self.snapshot_token
        )
        self._spawn(
            "snapshot-controller",
            [
                str(binary),
                "--kubeconfig=%s" % kubeconfig,
                "--leader-election=false",
                "--resync-period=%s" % SNAPSHOT_RESYNC,
                "--retry-interval-max=%s" % SNAPSHOT_RETRY_MAX,
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                # The lab serves no VolumeGroupSnapshot CRDs; with the gate on the controller would look
                # for them for 30 s before it starts.
                "--feature-gates=CSIVolumeGroupSnapshot=false",
                "--v=2",
            ],
        )

    def start_kubevirt_admission(self, feature_gates: list[str]) -> None:
        """KubeVirt's own validating admitters (tools/kubevirt-admission, kubevirt.io/kubevirt v1.6.0). The
        lab's controllers play virt-controller, so they are the service accounts virt-api trusts. Started
        before the API server: building virt-api's OpenAPI validator takes it seconds of CPU at start."""
        binary = built_dir(KUBEVIRT_ADMISSION_SCRIPT, "LAB_KUBEVIRT_ADMISSION_BIN") / "kubevirt-admission"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.kubevirt_admission_url = "https://127.0.0.1:%d" % free_port()
        self._spawn(
            "kubevirt-admission",
            [
                str(binary),
                "--listen=%s" % self.kubevirt_admission_url.removeprefix("https://"),
                "--tls-cert=%s" % self.ca_path,
                "--tls-key=%s" % self.key_path,
                "--feature-gates=%s" % ",".join(feature_gates),
                "--kubevirt-service-accounts=%s" % self.CONTROLLER_USER,
            ],
        )

    def register_kubevirt_admission(self, store, timeout: float = 60.0) -> None:
        """Once it answers, the ValidatingWebhookConfiguration for VirtualMachines and
        VirtualMachineInstances (CREATE and UPDATE, failing closed), as virt-api registers its own."""
        url = self.kubevirt_admission_url
        (proc,) = [proc for name, proc in self._procs if name == "kubevirt-admission"]
        _wait_healthy("kubevirt-admission", proc, url + "/healthz", self.ca_path, timeout)
        ca = base64.b64encode(self.ca_path.read_bytes()).decode()
        webhooks = [
            {
                "name": "%s.kubevirt-admission.lab.goldenimage.io" % plural,
                "clientConfig": {"url": "%s/%s" % (url, path), "caBundle": ca},
                "rules": [
                    {
                        "apiGroups": ["kubevirt.io"],
                        "apiVersions": ["*"],
                        "resources": [plural],
                        "operations": ["CREATE", "UPDATE"],
                    }
                ],
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
            }
            for plural, path in (
                ("virtualmachines", "validate-vm"),
                ("virtualmachineinstances", "validate-vmi"),
            )
        ]
        rt = store.resource("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations")
        _apply(store, rt, {"metadata": {"name": "kubevirt-admission"}, "webhooks": webhooks})

    def register_platform_endpoints(
        self, store, node_name: str, aggregated: bool = True, timeout: float = 60.0
    ) -> None:
        """Point kube-apiserver at the lab's listener for what a cluster's other servers answer.

        - KubeVirt's subresources: the APIService ``v1.subresources.kubevirt.io`` as virt-operator creates
          it, on the Service ``kubevirt/virt-api``. That Service is an ExternalName one naming the
          listener's address: Endpoints and EndpointSlices refuse loopback addresses, but kube-apiserver
          sends an ExternalName service to ``https://<externalName>:<APIService port>`` (ResolveCluster)
          and checks no endpoints for it. The port is the listener's, not virt-api's 443, for the same
          reason: an ExternalName service maps no ports.
        - Pod logs: the Node the lab's pods are bound to, with the listener as its kubelet endpoint
          (InternalIP 127.0.0.1, ``daemonEndpoints.kubeletEndpoint.Port``), Ready and untainted.
        Returns once the APIService is Available (its discovery answered through the aggregator).
        Without ``aggregated`` (no lab virt-api runs) only the Node is made.
        """
        from .tls import VIRT_API_HOST

        self._kubelet_node(store, node_name)
        if not aggregated:
            return

        namespace, service = VIRT_API_HOST.split(".")[1], VIRT_API_HOST.split(".")[0]
        _ensure_namespace(store, namespace)
        port = self.front.port
        _apply(
            store,
            store.resource("", "v1", "services"),
            {
                "metadata": {"name": service, "namespace": namespace},
                "spec": {
                    "type": "ExternalName",
                    "externalName": "127.0.0.1",
                    "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
                },
            },
        )
        ca = base64.b64encode(self.ca_path.read_bytes()).decode()
        group = "subresources.kubevirt.io"
        rt = store.resource("apiregistration.k8s.io", "v1", "apiservices")
        _apply(
            store,
            rt,
            {
                "metadata": {"name": "v1." + group, "labels": {"kubevirt.io": "virt-api-aggregator"}},
                "spec": {
                    "group": group,
                    "version": "v1",
                    "service": {"namespace": namespace, "name": service, "port": port},
                    "caBundle": ca,
                    # virt-operator's values (pkg/virt-operator/resource/generate/components/apiservices.go)
                    "groupPriorityMinimum": 1000,
                    "versionPriority": 15,
                },
            },
        )
        deadline = time.monotonic() + timeout
        while True:
            conditions = (store.get(rt, None, "v1." + group).get("status") or {}).get("conditions") or []
            available = [c for c in conditions if c.get("type") == "Available"]
            if available and available[0].get("status") == "True":
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    "APIService v1.%s not Available after %.0fs: %s" % (group, timeout, available)
                )
            time.sleep(0.1)

    def _kubelet_node(self, store, node_name: str) -> None:
        """The Node the lab's pods are bound to, its kubelet endpoint the lab's listener. It is cordoned:
        the lab binds its pods itself (pods/binding), and a node count the collection makes (replicas of
        a backing image, BACKING_IMAGE_REPLICAS) sees only the Nodes a test makes, as before it existed."""
        nodes = store.resource("", "v1", "nodes")
        labels = {"kubernetes.io/hostname": node_name}
        _apply(
            store, nodes, {"metadata": {"name": node_name, "labels": labels}, "spec": {"unschedulable": True}}
        )
        node = store.get(nodes, None, node_name)
        port = self.front.port
        node["status"] = {
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": node_name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        }
        node = store.update(nodes, node, subresource="status")
        # The API server taints a new Node not-ready (TaintNodesByCondition); the node lifecycle
        # controller, which the lab does not run, would lift it once the kubelet reports Ready.
        node["spec"] = dict(node.get("spec") or {}, taints=[], unschedulable=True)
        store.update(nodes, node)

    def _spawn(self, name: str, argv: list[str]) -> None:
        # A child dies with the process that started it (lifetime.py): a lab stopped by a kill -9 or a
        # time limit leaves nothing.
        argv = tied(argv)
        with open(self.dir / ("%s.log" % name), "ab") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._procs.append((name, proc))

    def _wait_ready(self, timeout: float) -> None:
        context = ssl.create_default_context(cafile=str(self.ca_path))
        request = urllib.request.Request(
            self.url + "/readyz", headers={"Authorization": "Bearer " + self.admin_token}
        )
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            for name, proc in self._procs:
                if proc.poll() is not None:
                    tail = (self.dir / ("%s.log" % name)).read_text(errors="replace")[-3000:]
                    raise RuntimeError("%s exited with %s:\n%s" % (name, proc.returncode, tail))
            try:
                with urllib.request.urlopen(request, context=context, timeout=5) as reply:
                    if reply.status == 200:
                        return
            except Exception as exc:  # not listening yet, or not ready
                last = exc
            time.sleep(0.2)
        raise RuntimeError("kube-apiserver not ready after %.0fs: %s" % (timeout, last))

    def write_kubeconfig(
        self, path: pathlib.Path, token: str | None = None, server: str | None = None
    ) -> pathlib.Path:
        ca = base64.b64encode(self.ca_path.read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "lab", "cluster": {"server": server or self.url, "certificate-authority-data": ca}}
            ],
            "users": [{"name": "lab-admin", "user": {"token": token or self.admin_token}}],
            "contexts": [
                {"name": "lab", "context": {"cluster": "lab", "user": "lab-admin", "namespace": "default"}}
            ],
            "current-context": "lab",
        }
        path = pathlib.Path(path)
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path

    # ------------------------------------------------------------ identities
    def authenticate(self, authorization: str | None):
        """The identity behind a bearer token, as the API server sees it (for the listener's routes)."""
        from .front import RemoteIdentity

        if not authorization or not authorization.startswith("Bearer "):
            return None
        token = authorization[7:].strip()
        if token == self.admin_token:
            return RemoteIdentity("lab-admin", ["system:masters"], self.store)
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        rt = self.store.resource("authentication.k8s.io", "v1", "tokenreviews")
        status = self.store.create(rt, review).get("status") or {}
        if not status.get("authenticated"):
            return None
        user = status.get("user") or {}
        return RemoteIdentity(user.get("username", ""), user.get("groups") or [], self.store)

    def grant(self, store, user: str, rules: list[dict]) -> None:
        """RBAC for a lab user: a ClusterRole per cluster-wide rule, a Role per namespace otherwise."""
        from .access import Rule

        rbac = "rbac.authorization.k8s.io"
        safe = "".join(ch if ch.isalnum() or ch in "-." else "-" for ch in user.lower()).strip("-.") or "user"
        cluster, per_namespace = [], {}
        for raw in rules:
            rule = raw if isinstance(raw, Rule) else Rule.from_dict(raw)
            policy = {
                "apiGroups": [g if g != "*" else "*" for g in rule.groups],
                "resources": rule.resources,
                "verbs": rule.verbs,
            }
            if not rule.namespaces or "*" in rule.namespaces:
                cluster.append(policy)
            else:
                for namespace in rule.namespaces:
                    per_namespace.setdefault(namespace, []).append(policy)
        subject = [{"kind": "User", "apiGroup": rbac, "name": user}]
        name = "lab-user-" + safe
        if cluster:
            _apply(
                store,
                store.resource(rbac, "v1", "clusterroles"),
                {"metadata": {"name": name}, "rules": cluster},
            )
            _apply(
                store,
                store.resource(rbac, "v1", "clusterrolebindings"),
                {
                    "metadata": {"name": name},
                    "subjects": subject,
                    "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": name},
                },
            )
        for namespace, policies in per_namespace.items():
            _ensure_namespace(store, namespace)
            meta = {"name": name, "namespace": namespace}
            _apply(store, store.resource(rbac, "v1", "roles"), {"metadata": meta, "rules": policies})
            _apply(
                store,
                store.resource(rbac, "v1", "rolebindings"),
                {
                    "metadata": meta,
                    "subjects": subject,
                    "roleRef": {"apiGroup": rbac, "kind": "Role", "name": name},
                },
            )

    # ------------------------------------------------------------ admission
    def register_admission(self, store) -> None:
        """A ValidatingWebhookConfiguration for every admission check a controller registered."""
        from .extensions import extensions

        checks = extensions(store).admission
        ca = base64.b64encode(self.ca_path.read_bytes()).decode()
        mutating = []
        for group, plural in sorted(store.hooks):
            mutating.append(
                {
                    "name": "%s.%s.mutate.lab.goldenimage.io" % (plural, group or "core"),
                    "clientConfig": {
                        "url": "%s/lab/mutate/%s/%s" % (self.front.url, group or "core", plural),
                        "caBundle": ca,
                    },
                    "rules": [
                        {
                            "apiGroups": [group],
                            "apiVersions": ["*"],
                            "resources": [plural],
                            "operations": ["CREATE", "UPDATE"],
                        }
                    ],
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "failurePolicy": "Fail",
                    "reinvocationPolicy": "Never",
                    "timeoutSeconds": 10,
                }
            )
        if mutating:
            rt = store.resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations")
            _apply(store, rt, {"metadata": {"name": "lab-controllers"}, "webhooks": mutating})
        if not checks:
            return
        webhooks = []
        for group, plural in sorted(checks):
            webhooks.append(
                {
                    "name": "%s.%s.lab.goldenimage.io" % (plural, group or "core"),
                    "clientConfig": {
                        "url": "%s/lab/admission/%s/%s" % (self.front.url, group or "core", plural),
                        "caBundle": ca,
                    },
                    "rules": [
                        {
                            "apiGroups": [group],
                            "apiVersions": ["*"],
                            "resources": [plural],
                            "operations": ["CREATE", "UPDATE", "DELETE"],
                        }
                    ],
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "failurePolicy": "Fail",
                    "timeoutSeconds": 10,
                }
            )
        rt = store.resource("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations")
        _apply(store, rt, {"metadata": {"name": "lab-controllers"}, "webhooks": webhooks})

    def wait_for_crds(self, store, timeout: float = 60.0) -> None:
        """Until every CRD is Established and discovery serves each of its served versions.

        Established comes before the group appears in discovery; a lab that looked a type up in between
        would not find it (a VolumeSnapshotClass created too early failed that way).
        """
        rt = store.resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        deadline = time.monotonic() + timeout
        while True:
            crds, _ = store.list(rt)
            pending = [
                c["metadata"]["name"]
                for c in crds
                if not any(
                    cond.get("type") == "Established" and cond.get("status") == "True"
                    for cond in (c.get("status") or {}).get("conditions") or ()
                )
            ]
            if not pending:
                store.discover()
                served = {(t.group, t.version, t.plural) for t in store.types()}
                pending = [
                    c["metadata"]["name"]
                    for c in crds
                    if any(
                        (c["spec"]["group"], v["name"], c["spec"]["names"]["plural"]) not in served
                        for v in c["spec"].get("versions") or ()
                        if v.get("served")
                    )
                ]
                if not pending:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    "CRDs not established and served after %.0fs: %s" % (timeout, ", ".join(pending))
                )
            time.sleep(0.1)

    # ----------------------------------------------------------------- audit
    def audit_records(self) -> list[dict]:
        """The API server's audit events as the lab's records, plus what the listener answered itself
        (injected faults, Harvester's routes)."""
        from urllib.parse import parse_qs, urlsplit

        with self.front._lock:
            injected = [dict(r) for r in self.front.injected]
        # A write whose reply the front dropped after the commit is in the server's log already.
        lost_replies = {r.pop("audit_id"): r for r in injected if r.get("audit_id")}
        injected = [r for r in injected if r not in lost_replies.values()]
        records = []
        with open(self.audit_path, "rb") as log:
            log.seek(self._audit_offset)
            for line in log:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if event.get("stage") != "ResponseComplete":
                    continue
                user = (event.get("user") or {}).get("username", "")
                if user == self.CONTROLLER_USER or user.startswith("system:"):
                    continue
                ref = event.get("objectRef") or {}
                query = parse_qs(urlsplit(event.get("requestURI", "")).query)
                record = {
                    "time": _epoch(event.get("requestReceivedTimestamp")),
                    "verb": event.get("verb", ""),
                    "path": event.get("requestURI", ""),
                    "user": user,
                    "dry_run": "All" in query.get("dryRun", []),
                    "code": (event.get("responseStatus") or {}).get("code", 0),
                    "namespace": ref.get("namespace", ""),
                    "group": ref.get("apiGroup", ""),
                    "resource": ref.get("resource", ""),
                    "subresource": ref.get("subresource", ""),
                    "name": ref.get("name", ""),
                }
                if event.get("auditID") in lost_replies:
                    record.update(dropped=True, committed=True)
                records.append(record)
        merged = sorted(records + injected, key=lambda r: r["time"])
        for seq, record in enumerate(merged, 1):
            record["seq"] = seq
        return merged

    def wait_writes(self, quiet: float = 0.5, timeout: float = 60.0) -> None:
        """Return once no write is in flight (received by kube-apiserver and not answered, or being
        forwarded by the fault proxy) and none began or ended for ``quiet`` seconds: what a killed
        client's last request commits is in the audit log then."""
        pending: set[str] = set()
        offset = 0
        last_change = time.monotonic()
        deadline = last_change + timeout
        while True:
            with open(self.audit_path, "rb") as log:
                log.seek(offset)
                lines = log.readlines()
                if lines and not lines[-1].endswith(b"\n"):
                    lines.pop()  # half written: read again next time
                offset += sum(len(line) for line in lines)
            for line in lines:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if event.get("verb") not in MUTATING:
                    continue
                last_change = time.monotonic()
                if event.get("stage") == "RequestReceived":
                    pending.add(event.get("auditID"))
                else:
                    pending.discard(event.get("auditID"))
            now = time.monotonic()
            if not pending and now - last_change >= quiet:
                if self.front is not None:
                    self.front.wait_writes(quiet, max(0.0, deadline - now))
                return
            if now >= deadline:
                raise TimeoutError("%d write(s) still in flight after %.0f s" % (len(pending), timeout))
            time.sleep(0.05)

    def clear_audit(self) -> None:
        self._audit_offset = self.audit_path.stat().st_size
        with self.front._lock:
            self.front.injected.clear()

    def stop(self) -> None:
        if self.front is not None:
            self.front.stop()
        for _, proc in reversed(self._procs):
            if proc.poll() is None:
                proc.terminate()
        for _, proc in reversed(self._procs):
            try:
                # kube-apiserver's graceful shutdown waits on connections its clients keep open (a
                # pooled keep-alive is enough); the lab's state is in etcd, so a short grace will do.
                proc.wait(timeout=STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs = []


def _wait_healthy(name: str, proc, url: str, ca_path: pathlib.Path, timeout: float) -> None:
    context = ssl.create_default_context(cafile=str(ca_path))
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(
                "%s exited with %s (see its log in the lab's apiserver directory)" % (name, proc.returncode)
            )
        try:
            with urllib.request.urlopen(url, context=context, timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise RuntimeError("%s not answering %s after %.0fs: %s" % (name, url, timeout, exc)) from exc
        time.sleep(0.1)


def new_token() -> str:
    return secrets.token_urlsafe(32)


def _epoch(stamp: str | None) -> float:
    import datetime

    if not stamp:
        return time.time()
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _apply(store, rt, obj: dict) -> dict:
    from .objects import ApiError

    meta = obj["metadata"]
    try:
        current = store.get(rt, meta.get("namespace"), meta["name"])
    except ApiError as exc:
        if exc.code != 404:
            raise
        return store.create(rt, obj)
    merged = dict(current, **{k: v for k, v in obj.items() if k != "metadata"})
    return store.update(rt, merged)


def _ensure_namespace(store, name: str) -> None:
    from .objects import ApiError

    try:
        store.create(store.resource("", "v1", "namespaces"), {"metadata": {"name": name}})
    except ApiError as exc:
        if exc.code != 409:
            raise
