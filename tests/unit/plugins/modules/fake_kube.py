"""An in-memory stand-in for the collection's own Kubernetes adapter (``_kube.KubeModule``), so runners can
be called with parameters and an observed state, no cluster and no ``SystemExit``. It implements the
adapter's interface (get, list, create, patch, delete, wait, resource, served), not the kubernetes client."""

from __future__ import annotations

import copy

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._wait import WaitFailed
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeError, merge_patch

from tests.unit.plugins.modules.support import list_each


def params_of(argument_spec, **given):
    """The params AnsibleModule would hand the runner: every option, defaults filled in."""
    result = {}
    for name, spec in argument_spec.items():
        result[name] = copy.deepcopy(spec.get("default"))
    result.update(given)
    return result


class ApiError(Exception):
    """What the kubernetes client raises for an HTTP error (status, reason, body)."""

    def __init__(self, status, reason, message):
        super().__init__(message)
        self.status, self.reason = status, reason
        self.body = {"kind": "Status", "code": status, "reason": reason, "message": message}


class _Resource:
    def __init__(self, kube, api_version, kind, refuse=None):
        self.kube, self.api_version, self.kind, self.refuse = kube, api_version, kind, refuse
        self.namespaced = True

    def create(self, body, namespace=None):
        if self.refuse:
            raise self.refuse
        self.kube.create(body)

    def replace(self, body, name, namespace=None):
        if self.refuse:
            raise self.refuse
        self.kube.objects[(self.api_version, self.kind, namespace, name)] = copy.deepcopy(body)
        self.kube.writes.append(("replace", self.kind, namespace, name))


class _Found:
    def __init__(self, group, version, name):
        self.group, self.group_version, self.name, self.preferred = (
            group,
            "%s/%s" % (group, version),
            name,
            True,
        )


class _Discovery:
    def __init__(self, kube):
        self.kube = kube

    def search(self, kind):
        return [_Found(g, v, n) for (g, v, k, n) in self.kube.discovery if k == kind]


class _Client:
    def __init__(self, kube):
        self.resources = _Discovery(kube)


class FakeKube:
    list_each = list_each

    def __init__(self, params, objects=(), check_mode=False, on_create=None, refuse=None):
        self.params = params
        self.check_mode = check_mode
        self._diff = False
        self.mutations = 0
        self.objects = {}
        self.writes = []
        self.warnings = []
        self.discovery = []
        self.on_create = on_create
        self.refuse = refuse or {}  # (apiVersion, kind) -> exception raised by writes of that kind
        self.client = _Client(self)
        for obj in objects:
            self.add(obj)

    def add(self, obj):
        meta = obj["metadata"]
        self.objects[(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])] = copy.deepcopy(
            obj
        )

    def serve(self, group, version, kind, plural):
        self.discovery.append((group, version, kind, plural))

    # reads
    def get(self, api_version, kind, name, namespace=None):
        return copy.deepcopy(self.objects.get((api_version, kind, namespace, name)))

    def list(self, api_version, kind, namespace=None, **_selectors):
        return [
            copy.deepcopy(obj)
            for (api, k, ns, _n), obj in sorted(self.objects.items(), key=lambda item: str(item[0]))
            if api == api_version and k == kind and (namespace is None or ns == namespace)
        ]

    def served(self, api_version, kind):
        return True

    def resource(self, api_version, kind):
        return _Resource(self, api_version, kind, self.refuse.get((api_version, kind)))

    def warn(self, msg):
        self.warnings.append(msg)

    def fail_from_exception(self, action, exc, **extra):
        raise KubeError.from_exception(action, exc, **extra)

    # writes
    def create(self, definition):
        if self.check_mode:
            return copy.deepcopy(definition)
        meta = definition["metadata"]
        obj = copy.deepcopy(definition)
        obj["metadata"].setdefault("uid", "uid-" + meta["name"])
        if self.on_create:
            self.on_create(obj)
        self.add(obj)
        self.writes.append(("create", definition["kind"], meta.get("namespace"), meta["name"]))
        return copy.deepcopy(obj)

    def patch(self, api_version, kind, name, namespace, patch, before=None):
        before = before or self.get(api_version, kind, name, namespace)
        after = merge_patch(before, patch)
        if after == before:
            return before, False
        if not self.check_mode:
            self.objects[(api_version, kind, namespace, name)] = after
            self.writes.append(("patch", kind, namespace, name))
        return after, True

    def delete(self, api_version, kind, name, namespace=None, before=None, propagation=None):
        if (api_version, kind, namespace, name) not in self.objects:
            return False
        if not self.check_mode:
            del self.objects[(api_version, kind, namespace, name)]
            self.writes.append(("delete", kind, namespace, name))
        return True

    def delete_and_wait(self, api_version, kind, name, namespace, timeout, sleep, before=None, **options):
        """Objects here are gone at once, as a finalizer-free object is."""
        return self.delete(
            api_version, kind, name, namespace, before=before, propagation=options.get("propagation")
        )

    def wait(
        self, api_version, kind, name, namespace, predicate, describe, pending, timeout, sleep, progress=None
    ):
        obj = self.get(api_version, kind, name, namespace)
        done, failure = predicate(obj)
        if done:
            return obj, 0.0
        raise WaitFailed("waiting for %s: %s" % (pending, failure or describe(obj)), obj, describe(obj))

    def wait_round(
        self, rounds, api_version, kind, name, namespace, predicate, describe, pending, sleep, progress=None
    ):
        """``_kube.wait_round``: this round's share of the wait, here one look (done, or the wait fails)."""
        obj, _seconds = self.wait(
            api_version, kind, name, namespace, predicate, describe, pending, rounds.timeout, sleep, progress
        )
        return obj, True
