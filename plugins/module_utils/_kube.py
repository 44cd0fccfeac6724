# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Kubernetes adapter shared by every cluster-facing module of this collection.

Authentication is exactly kubernetes.core's: its argument spec and its client factory are reused,
not copied. The ``kubernetes`` library is imported on first use, never when the module loads, so
a controller without it gets the standard "requires kubernetes" message.

Check mode is predicted here, client side: in check mode no mutating request (not even a
server-side dry run) is sent, and the helpers return what the object would become.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC

from ansible_collections.goldenimage.pipeline.plugins.module_utils._wait import wait_for
from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import PipelineError

# Fields the server owns: comparing them would report a change on every run.
SERVER_METADATA = ("managedFields", "resourceVersion", "generation", "uid", "creationTimestamp", "selfLink")
SERVER_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)
TRANSIENT_STATUS = (429, 500, 502, 503, 504)
MERGE_PATCH = "application/merge-patch+json"
# Waits poll after a quarter second first, then back off to the module's wait_sleep.
FIRST_POLL = 0.25
KUBERNETES_REASON = (
    "to talk to the Kubernetes API. Modules of goldenimage.pipeline run on the Ansible controller: "
    "install it there and use delegate_to: localhost (or connection: local) for these tasks"
)


def auth_argument_spec():
    """kubernetes.core's auth options (kubeconfig, context, host, api_key, proxy_headers, ...)."""
    return copy.deepcopy(AUTH_ARG_SPEC)


def strip_server_fields(obj, include_status=False):
    """A copy of ``obj`` without server-managed fields (and without status unless asked)."""
    if obj is None:
        return None
    result = copy.deepcopy(obj)
    meta = result.get("metadata")
    if isinstance(meta, dict):
        for key in SERVER_METADATA:
            meta.pop(key, None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            for key in SERVER_ANNOTATIONS:
                annotations.pop(key, None)
        for key in ("labels", "annotations"):
            if key in meta and not meta[key]:
                del meta[key]
    if not include_status:
        result.pop("status", None)
    return result


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch: what the server returns for ``application/merge-patch+json``."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def object_diff(before, after, include_status=False):
    """``{"before": ..., "after": ...}`` for Ansible's --diff, server fields removed."""
    return {
        "before": strip_server_fields(before, include_status) or {},
        "after": strip_server_fields(after, include_status) or {},
    }


def same_object(before, after, include_status=False):
    return strip_server_fields(before, include_status) == strip_server_fields(after, include_status)


def _parse_body(body):
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str):
        try:
            return json.loads(body)
        except ValueError:
            return body
    return body


def _is_connection_error(exc):
    try:
        import urllib3.exceptions
    except ImportError:
        return False
    return isinstance(exc, urllib3.exceptions.HTTPError)


def error_details(exc):
    """``{message, reason, status, body}`` from an API error, a connection error or anything else.

    An API error's body is the server's Status object: its message, reason and code are what
    a user needs, not the HTTP response dump that ``str(exc)`` gives.
    """
    cls = type(exc).__name__
    if hasattr(exc, "status") and hasattr(exc, "body") and hasattr(exc, "reason"):
        body = _parse_body(exc.body)
        if isinstance(body, dict) and body.get("kind") == "Status":
            return {
                "message": body.get("message") or body.get("reason") or exc.reason,
                "reason": body.get("reason") or exc.reason,
                "status": body.get("code") or exc.status,
                "body": body,
            }
        message = exc.reason or "HTTP %s" % exc.status
        if body:
            message = "%s: %s" % (message, str(body)[:500])
        return {"message": message, "reason": exc.reason, "status": exc.status, "body": body or None}
    if _is_connection_error(exc):
        cause = getattr(exc, "reason", None) or exc
        return {
            "message": "cannot reach the API server: %s" % cause,
            "reason": "ConnectionError",
            "status": None,
            "body": None,
        }
    if cls == "ResourceNotFoundError":
        return {
            "message": "the API server does not serve this kind (is its CRD installed?): %s" % exc,
            "reason": "NotFound",
            "status": None,
            "body": None,
        }
    return {"message": str(exc) or cls, "reason": cls, "status": None, "body": None}


def failure_message(action, exc):
    """``"<action>: <message> (<reason>, <code>)"`` and the details it was built from."""
    details = error_details(exc)
    tail = ", ".join(str(part) for part in (details["reason"], details["status"]) if part)
    msg = "%s: %s" % (action, details["message"])
    if tail:
        msg = "%s (%s)" % (msg, tail)
    return msg, details


def status_code(exc):
    code = getattr(exc, "status", None)
    return code if isinstance(code, int) else None


def is_transient(exc):
    """Errors worth riding out while polling: throttling, 5xx and dropped connections."""
    return status_code(exc) in TRANSIENT_STATUS or _is_connection_error(exc)


class KubeError(PipelineError):
    """An API request that failed: ``msg`` is "<action>: <cause> (<reason>, <code>)", the Status attached."""

    @classmethod
    def from_exception(cls, action, exc, **extra):
        msg, details = failure_message(action, exc)
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        error = cls(
            msg,
            reason=details["reason"],
            status=details["status"],
            body=details["body"],
            exception=tb,
            **extra,
        )
        error.cause = exc
        return error


def ref(kind, name, namespace=None):
    return "%s %s/%s" % (kind, namespace, name) if namespace else "%s %s" % (kind, name)


class KubeModule(AnsibleModule):
    """AnsibleModule with kubernetes.core's auth options, one lazily built client and a resource cache.

    The helpers raise ``KubeError`` (a ``PipelineError``) so every API error reads the same and the
    module's one exit turns it into ``fail_json``; they never exit themselves.
    """

    def __init__(self, argument_spec=None, **kwargs):
        spec = auth_argument_spec()
        spec.update(argument_spec or {})
        super(KubeModule, self).__init__(argument_spec=spec, **kwargs)
        self._kube_client = None
        self._resources = {}
        self.mutations = 0

    # kubernetes.core's client factory asks its module for these two.
    @property
    def server_side_dry_run(self):
        return False

    def requires(self, dependency, minimum=None, reason=None):
        from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import requires

        try:
            requires(dependency, minimum, reason=reason)
        except Exception as exc:
            raise PipelineError(str(exc)) from exc

    @property
    def client(self):
        if self._kube_client is None:
            try:
                import kubernetes  # noqa: F401
            except ImportError as exc:
                raise PipelineError(
                    missing_required_lib("kubernetes", reason=KUBERNETES_REASON),
                    exception=traceback.format_exc(),
                ) from exc
            from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client

            try:
                self._kube_client = get_api_client(module=self)
            except Exception as exc:
                self.fail_from_exception("connect to the Kubernetes API", exc)
        return self._kube_client

    def _discover(self, api_version, kind):
        # A bare version is the core group: say so, or discovery walks every group that has a "v1".
        prefix = {} if "/" in api_version else {"prefix": "api"}
        return self.client.resources.get(api_version=api_version, kind=kind, **prefix)

    def resource(self, api_version, kind):
        """The API resource for (apiVersion, kind), discovered once per run."""
        key = (api_version, kind)
        if key not in self._resources:
            try:
                self._resources[key] = self._discover(api_version, kind)
            except Exception as exc:
                self.fail_from_exception("find %s in %s" % (kind, api_version), exc)
        return self._resources[key]

    def served(self, api_version, kind):
        """Whether the cluster serves (apiVersion, kind), for kinds whose CRD a cluster may lack."""
        if (api_version, kind) in self._resources:
            return True
        try:
            self._resources[(api_version, kind)] = self._discover(api_version, kind)
        except Exception as exc:
            if type(exc).__name__ == "ResourceNotFoundError":
                return False
            self.fail_from_exception("find %s in %s" % (kind, api_version), exc)
        return True

    def fail_from_exception(self, action, exc, **extra):
        """Raise ``KubeError`` for a failed request (never exits: the module's one exit does)."""
        if isinstance(exc, PipelineError):
            exc.fields.update(extra)
            raise exc
        raise KubeError.from_exception(action, exc, **extra)

    def fail_from_wait(self, exc, **extra):
        """Raise a wait's error with ``extra`` result fields added; ``stuck`` says whether anything moved."""
        exc.fields.update(extra)
        raise exc

    # Reads -----------------------------------------------------------------------------------

    def fetch(self, api_version, kind, name, namespace=None):
        """The object as a dict, or None when it does not exist. Other errors raise."""
        res = self.resource(api_version, kind)
        try:
            return res.get(name=name, namespace=namespace if res.namespaced else None).to_dict()
        except Exception as exc:
            if status_code(exc) == 404:
                return None
            raise

    def get(self, api_version, kind, name, namespace=None):
        try:
            return self.fetch(api_version, kind, name, namespace)
        except Exception as exc:
            self.fail_from_exception("get %s" % ref(kind, name, namespace), exc)

    def list(self, api_version, kind, namespace=None, label_selector=None, field_selector=None):
        res = self.resource(api_version, kind)
        params = {}
        if label_selector:
            params["label_selector"] = label_selector
        if field_selector:
            params["field_selector"] = field_selector
        try:
            items = res.get(namespace=namespace if res.namespaced else None, **params).to_dict().get("items")
        except Exception as exc:
            if status_code(exc) == 404 and namespace:
                return []
            where = " in %s" % namespace if namespace else ""
            self.fail_from_exception("list %s%s" % (kind, where), exc)
        for item in items or []:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items or []

    # Writes: each predicts in check mode and sends nothing -----------------------------------

    def _send(self, action, call):
        self.mutations += 1
        try:
            return call().to_dict()
        except Exception as exc:
            self.fail_from_exception(action, exc)

    def create(self, definition):
        """Create ``definition``; in check mode return it as the prediction."""
        meta = definition.get("metadata") or {}
        kind, name, namespace = definition.get("kind"), meta.get("name"), meta.get("namespace")
        if self.check_mode:
            return copy.deepcopy(definition)
        res = self.resource(definition["apiVersion"], kind)
        return self._send(
            "create %s" % ref(kind, name, namespace),
            lambda: res.create(body=definition, namespace=namespace if res.namespaced else None),
        )

    def patch(self, api_version, kind, name, namespace, patch, before=None):
        """Merge-patch an object. Returns ``(after, changed)``; no request when nothing would change."""
        if before is None:
            before = self.get(api_version, kind, name, namespace)
        predicted = merge_patch(before, patch)
        if before is not None and same_object(before, predicted):
            return before, False
        if self.check_mode:
            return predicted, True
        res = self.resource(api_version, kind)
        after = self._send(
            "patch %s" % ref(kind, name, namespace),
            lambda: res.patch(
                body=patch,
                name=name,
                namespace=namespace if res.namespaced else None,
                content_type=MERGE_PATCH,
            ),
        )
        return after, not same_object(before, after)

    def replace(self, definition, before=None):
        """Replace an object (optimistic: uses ``before``'s resourceVersion). Returns ``(after, changed)``."""
        meta = definition.get("metadata") or {}
        kind, name, namespace = definition.get("kind"), meta.get("name"), meta.get("namespace")
        if before is None:
            before = self.get(definition["apiVersion"], kind, name, namespace)
        desired = copy.deepcopy(definition)
        if before is not None:
            if same_object(before, desired):
                return before, False
            desired.setdefault("metadata", {}).setdefault(
                "resourceVersion", (before.get("metadata") or {}).get("resourceVersion")
            )
        if self.check_mode:
            return desired, True
        res = self.resource(definition["apiVersion"], kind)
        after = self._send(
            "replace %s" % ref(kind, name, namespace),
            lambda: res.replace(body=desired, name=name, namespace=namespace if res.namespaced else None),
        )
        return after, not same_object(before, after)

    def delete(self, api_version, kind, name, namespace=None, before=None):
        """Delete an object. Returns True when it existed (and, outside check mode, was deleted)."""
        if before is None:
            before = self.get(api_version, kind, name, namespace)
        if before is None:
            return False
        if self.check_mode:
            return True
        res = self.resource(api_version, kind)
        self.mutations += 1
        try:
            res.delete(name=name, namespace=namespace if res.namespaced else None)
        except Exception as exc:
            if status_code(exc) == 404:
                return False
            self.fail_from_exception("delete %s" % ref(kind, name, namespace), exc)
        return True

    # Waits -----------------------------------------------------------------------------------

    def wait(
        self, api_version, kind, name, namespace, predicate, describe, pending, timeout, sleep, progress=None
    ):
        """Poll one object until ``predicate`` holds; returns ``(obj, duration)``; raises WaitError.

        Throttling, 5xx and dropped connections during the poll are ridden out, not fatal.
        """
        return wait_for(
            lambda: self.fetch(api_version, kind, name, namespace),
            predicate,
            timeout,
            sleep,
            describe=describe,
            progress=progress,
            pending=pending,
            transient=is_transient,
            first_sleep=FIRST_POLL,
        )
