# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The module-facing Kubernetes client shared by every cluster-facing module of this collection.

Authentication is exactly kubernetes.core's: its argument spec and its client factory are reused,
not copied (``_kube_auth``). The ``kubernetes`` library is imported on first use, never when the module
loads, so a controller without it gets the standard "requires kubernetes" message. Reads (discovery,
get, list) do not need it at all when the credentials are of the common forms: they go over the raw
path (``_kube_raw``, which says why it exists).

Check mode is predicted here, client side: in check mode no mutating request (not even a
server-side dry run) is sent, and the helpers return what the object would become.

Every request rides on the collection's one retry layer (``_retry``, with the Kubernetes policy):
throttling, 5xx and dropped connections are retried with full jitter, bounded in attempts and in
time. What a retry may not repeat blindly is decided by the write's own rule: a create that meets 409
reads the object back and keeps it only when it is the one it sent (the reply of an earlier attempt
was lost after the server committed it), an update that meets 409 re-reads and re-applies, a delete
that meets 404 on a retry is done.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import os
import random
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import _retry, retries
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._gc import paused_gc
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._wait import wait_for
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.inputs import kubeconfig_file
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.redact import (
    secrets_in,
    strip_query,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import _kube_raw
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube_auth import auth_argument_spec
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube_raw import (
    ApiError,
    RawConnection,
    ResourceNotFoundError,
    api_prefix,
    find_kind,
    unserved_kind,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._listpage import decode_page

# Fields the server owns: comparing them would report a change on every run.
SERVER_METADATA = ("managedFields", "resourceVersion", "generation", "uid", "creationTimestamp", "selfLink")
SERVER_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)
MERGE_PATCH = "application/merge-patch+json"
# Waits poll after a quarter second first, then back off to the module's wait_sleep.
FIRST_POLL = 0.25
STREAM_CHUNK = 1024 * 1024
# Objects per list page (the API server's limit/continue), and how often an expired continue restarts a list.
# Pages of 10,000 were answered faster than pages of 2,000, in a fifth of the requests (bench/README.md,
# "List page size").
LIST_PAGE = 10000
LIST_RESTARTS = 3
# Lists of different kinds in flight at once (``list_each``): the API server builds one while this process
# parses another (bench/README.md, "Lists in flight"). Kept small: each is a large request to the API
# server, as an informer's initial list is.
LIST_WORKERS = 3
# Set on a create that has only generateName: the retry after a lost reply finds its object by it.
CREATE_REQUEST_LABEL = "goldenimage.pipeline/create-request"
KUBERNETES_REASON = (
    "to talk to the Kubernetes API. Modules of goldenimage.pipeline run on the Ansible controller: "
    "install it there and use delegate_to: localhost (or connection: local) for these tasks"
)


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
    return retries.transient_status(status_code(exc)) or _is_connection_error(exc)


def retry_after(exc):
    """Seconds from the Retry-After header of an API error, or None."""
    headers = getattr(exc, "headers", None)
    try:
        return retries.retry_after(headers.get("Retry-After") if headers is not None else None)
    except AttributeError:
        return None


def differences(desired, actual, path=""):
    """Paths where ``actual`` does not hold what ``desired`` says (fields the server added are fine).

    Dicts: every key of ``desired`` must be in ``actual`` with a matching value; lists: the same length,
    item by item; anything else: equal. This is how a create recognises the object it sent.
    """
    if isinstance(desired, dict):
        if not isinstance(actual, dict):
            return [path or "."]
        out = []
        for key, value in desired.items():
            child = "%s.%s" % (path, key) if path else str(key)
            if key not in actual:
                if value in (None, {}, []):
                    continue
                out.append(child)
            else:
                out.extend(differences(value, actual[key], child))
        return out
    if isinstance(desired, list):
        if not isinstance(actual, list) or len(actual) != len(desired):
            return [path or "."]
        out = []
        for index, want in enumerate(desired):
            out.extend(differences(want, actual[index], "%s[%d]" % (path, index)))
        return out
    return [] if desired == actual else [path or "."]


def sent_fields(definition):
    """What of a definition a read-back must show: the definition without server-set or naming fields."""
    desired = strip_server_fields(definition)
    meta = desired.get("metadata") or {}
    meta.pop("generateName", None)
    return desired


def undecided(exc):
    """Whether the retry layer (or a read's caller) still decides what ``exc`` means: any foreign error,
    and the raw path's answers, which stand for the client's ApiException and ResourceNotFoundError.
    Every other ``PipelineError`` is a verdict and passes through as it is."""
    return not isinstance(exc, PipelineError) or isinstance(exc, (ApiError, ResourceNotFoundError))


class KubeError(PipelineError):
    """An API request that failed: ``msg`` is "<action>: <cause> (<reason>, <code>)", the Status attached."""

    @property
    def status(self):
        """The HTTP code, so ``status_code()`` reads a KubeError as it reads the client's errors."""
        return self.fields.get("status")

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
    module's one exit turns it into ``fail_json``; they never exit themselves. Every request they send
    rides on ``self.backoff`` (``_retry.kubernetes()``); ``self.retried`` counts the retries of the run.
    """

    def __init__(self, argument_spec=None, **kwargs):
        spec = auth_argument_spec()
        spec.update(argument_spec or {})
        super(KubeModule, self).__init__(argument_spec=spec, **kwargs)
        # A password or signature inside a URL, in any option, is masked in everything the module returns,
        # its invocation included (a refusal of that URL is printed with it at -vvv otherwise).
        self.no_log_values.update(secrets_in(self.params))
        self._kube_client = None
        self._resources = {}
        self._raw = None  # the raw read connection, False when the credentials need the client
        self._raw_paths = {}
        self._raw_groups = {}
        self.mutations = 0
        self.written = []  # "created ConfigMap ns/x", ...: what this run changed, in order
        self.retried = 0
        self.backoff = _retry.kubernetes()

    def fail_json(self, msg, **kwargs):
        """Fail with what this run wrote before the failure (``written``): a run stopped half-way, by a
        permission it lacks or anything else, says what exists now. A 403 names it in the message too."""
        written = getattr(self, "written", None)  # unset when the options fail validation in __init__
        if written:
            kwargs.setdefault("written", list(written))
            if kwargs.get("status") == 403:
                shown = ", ".join(written[:10])
                if len(written) > 10:
                    shown += " and %d more" % (len(written) - 10)
                msg = "%s. Written by this run before the refusal: %s" % (msg.rstrip(". "), shown)
        super(KubeModule, self).fail_json(msg=msg, **kwargs)

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

            path = self.params.get("kubeconfig")
            if isinstance(path, str) and path:
                kubeconfig_file(path, os.path.exists(os.path.expanduser(path)))
            self._kube_client = self._retrying(
                "connect to the Kubernetes API", lambda: get_api_client(module=self)
            )
        return self._kube_client

    @property
    def api_client(self):
        """The ``kubernetes.client.ApiClient`` behind the dynamic client, configured like every request."""
        return self.client.client.client

    # The retry layer ---------------------------------------------------------------------------

    def _retrying(self, action, call, recover=None):
        """``call()`` until it returns, riding out transient errors within ``self.backoff``'s bound.

        ``recover(exc, attempts)`` sees every other error first: it returns ``(True, value)`` to end
        with ``value``, ``(False, None)`` to retry, or None to fail with the error.
        """

        def decide(exc, attempts):
            if not undecided(exc):
                return None
            again = (_retry.AGAIN, error_details(exc)["reason"], retry_after(exc))
            outcome = recover(exc, attempts) if recover is not None else None
            if outcome is not None:
                return (_retry.DONE, outcome[1]) if outcome[0] else again
            return again if is_transient(exc) else (_retry.FAIL,)

        def give_up(exc, attempts):
            raise KubeError.from_exception(action + attempts.note(), exc, attempts=attempts.tried)

        attempts = self.backoff.start()
        try:
            return self.backoff.run(call, decide, give_up, attempts)
        finally:
            self.retried += attempts.tried - 1

    def _discover(self, api_version, kind):
        # A bare version is the core group: say so, or discovery walks every group that has a "v1".
        prefix = {} if "/" in api_version else {"prefix": "api"}
        return self.client.resources.get(api_version=api_version, kind=kind, **prefix)

    def resource(self, api_version, kind):
        """The API resource for (apiVersion, kind), discovered once per run."""
        key = (api_version, kind)
        if key not in self._resources:
            self._resources[key] = self._retrying(
                "find %s in %s" % (kind, api_version), lambda: self._discover(api_version, kind)
            )
        return self._resources[key]

    def served(self, api_version, kind):
        """Whether the cluster serves (apiVersion, kind), for kinds whose CRD a cluster may lack."""
        if (api_version, kind) in self._resources or (api_version, kind) in self._raw_paths:
            return True

        def unserved(exc, _attempts):
            return (True, None) if type(exc).__name__ == "ResourceNotFoundError" else None

        raw = self._kube_client is None and self.raw_connection() is not None
        discover, cache = (self._raw_discover, self._raw_paths) if raw else (self._discover, self._resources)
        found = self._retrying(
            "find %s in %s" % (kind, api_version), lambda: discover(api_version, kind), unserved
        )
        if found is None:
            return False
        cache[(api_version, kind)] = found
        return True

    # The read path: raw when the credentials allow (see ``_kube_raw``) -------------------------------

    def raw_connection(self):
        """The ``RawConnection`` reads go over, or None when the credentials need the kubernetes client."""
        if self._raw is None:
            self._raw = False
            path = self.params.get("kubeconfig")
            if isinstance(path, str) and path:
                kubeconfig_file(path, os.path.exists(os.path.expanduser(path)))
            self._raw = _kube_raw.connect(self.params) or False
        return self._raw or None

    def _reader(self):
        """What a read is sent on: the client's ApiClient once built, else the raw connection."""
        if self._kube_client is None:
            raw = self.raw_connection()
            if raw is not None:
                return raw
        return self.api_client

    def _raw_discover(self, api_version, kind):
        """``RawPath`` of a kind from its group version's resource list, read once per group version."""
        if api_version not in self._raw_groups:
            try:
                self._raw_groups[api_version] = self._get_json(
                    api_prefix(api_version), api=self.raw_connection()
                )
            except ApiError as exc:
                if exc.status != 404:
                    raise
                self._raw_groups[api_version] = None
        if self._raw_groups[api_version] is None:
            raise unserved_kind(api_version, kind)
        return find_kind(self._raw_groups[api_version], api_version, kind)

    def locate(self, api_version, kind):
        """Where (apiVersion, kind) lives, for reads: its ``path(name, namespace)`` and ``namespaced``.

        Discovered once per run: raw (one GET of the group version) until the client is built, the
        dynamic client's resource after that.
        """
        key = (api_version, kind)
        if key in self._resources:
            return self._resources[key]
        if key in self._raw_paths:
            return self._raw_paths[key]
        if self._kube_client is None and self.raw_connection() is not None:
            self._raw_paths[key] = self._retrying(
                "find %s in %s" % (kind, api_version), lambda: self._raw_discover(api_version, kind)
            )
            return self._raw_paths[key]
        return self.resource(api_version, kind)

    def fail_from_exception(self, action, exc, **extra):
        """Raise ``KubeError`` for a failed request (never exits: the module's one exit does)."""
        if not undecided(exc):
            exc.fields.update(extra)
            raise exc
        raise KubeError.from_exception(action, exc, **extra)

    def fail_from_wait(self, exc, **extra):
        """Raise a wait's error with ``extra`` result fields added; ``stuck`` says whether anything moved."""
        exc.fields.update(extra)
        raise exc

    # Reads -----------------------------------------------------------------------------------

    def _read(self, api_version, kind, name, namespace):
        res = self.locate(api_version, kind)
        try:
            return self._get_json(res.path(name=name, namespace=namespace if res.namespaced else None))
        except Exception as exc:
            if status_code(exc) == 404:
                return None
            raise

    def _get_json(self, path, query=None, api=None):
        """GET ``path`` once and parse the body as JSON (no dynamic-client objects are built).

        Raises the client's ``ApiException`` (``ApiError`` on the raw path) for a non-2xx answer, so
        the caller's retry layer decides.
        """
        return json.loads(self._get_body(path, query, api))

    def _get_page(self, path, query, keep_managed_fields):
        """GET one page of a list once and parse it (``_listpage.decode_page``)."""
        return decode_page(self._get_body(path, query), keep_managed_fields)

    def _get_body(self, path, query=None, api=None):
        """GET ``path`` once: the body as bytes (see ``_get_json``)."""
        api = api or self._reader()
        url = api.configuration.host.rstrip("/") + path
        if query:
            from urllib.parse import urlencode

            url += "?" + urlencode(query)
        response = self._pool_request(api, "GET", url, {"Accept": "application/json"}, None, None, False)
        try:
            return response.data
        finally:
            response.release_conn()

    def fetch(self, api_version, kind, name, namespace=None):
        """The object as a dict, or None when it does not exist; transient errors are retried.

        Other errors (and a transient one past the bound) raise ``KubeError``.
        """
        return self._retrying(
            "get %s" % ref(kind, name, namespace), lambda: self._read(api_version, kind, name, namespace)
        )

    def get(self, api_version, kind, name, namespace=None):
        return self.fetch(api_version, kind, name, namespace)

    def list(
        self,
        api_version,
        kind,
        namespace=None,
        label_selector=None,
        field_selector=None,
        page=None,
        managed_fields=False,
    ):
        """Every object of a kind as plain dicts, read page by page (``limit``/``continue``).

        List bodies are parsed as JSON: no dynamic-client objects are built, which is what keeps a
        list of tens of thousands of objects linear and cheap. Each page rides on the retry layer; a
        continue token that expired (410) restarts the list from its first page, a bounded number of
        times. A namespace that does not exist lists as empty.

        ``metadata.managedFields`` (the server's record of which client set which field) is dropped
        from each page as it is parsed unless ``managed_fields``: no rule reads it, and it is about
        half of what a list holds in memory (golden_info at 50,000 projects, the module's process at its
        peak: 1,039 MiB against 2,080 MiB). With msgspec installed it is skipped without being built
        (see ``_listpage``).
        """
        res = self.locate(api_version, kind)
        path = res.path(namespace=namespace if res.namespaced else None)
        query = []
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        query.append(("limit", int(page or LIST_PAGE)))
        where = " in %s" % namespace if namespace else ""
        action = "list %s%s" % (kind, where)

        def absent_namespace(exc, _attempts):
            return (True, {"items": []}) if status_code(exc) == 404 and namespace else None

        with paused_gc():
            items = self._pages(action, path, query, absent_namespace, managed_fields)
        for item in items:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

    def list_each(self, queries):
        """``[items of each query]``, in the order given: one ``list`` per query (dicts with ``api``,
        ``kind``, ``namespace`` and ``selector``), up to ``LIST_WORKERS`` in flight at once.

        Discovery runs first, on this thread, so the lists share what it found. When lists fail, the
        error of the earliest in the order given is raised, once the lists in flight have ended.
        """
        for query in queries:
            self.locate(query["api"], query["kind"])

        def one(query):
            return self.list(
                query["api"], query["kind"], query["namespace"], label_selector=query["selector"]
            )

        if len(queries) < 2:
            return [one(query) for query in queries]
        from concurrent.futures import ThreadPoolExecutor

        # Paused around all of them: a list ending must not restart the collector while another parses.
        with paused_gc(), ThreadPoolExecutor(LIST_WORKERS, thread_name_prefix="kube-list") as pool:
            futures = [pool.submit(one, query) for query in queries]
            try:
                return [future.result() for future in futures]
            except BaseException:
                for future in futures:
                    future.cancel()
                raise

    def _pages(self, action, path, query, absent_namespace, managed_fields):
        """The items of every page of one list, following ``continue``; an expired token restarts it.

        A page rides on the retry layer like any read; a 410 on a page after the first (its continue
        token expired) is the page's answer "start again", not a failure, ``LIST_RESTARTS`` times.
        """
        expired = object()
        listed = {"items": [], "token": None, "restarts": 0}

        def restart_or_absent(exc, attempts):
            if listed["token"] and status_code(exc) == 410 and listed["restarts"] < LIST_RESTARTS:
                return True, expired
            return absent_namespace(exc, attempts)

        def page(sent):
            return self._retrying(
                action, lambda: self._get_page(path, sent, managed_fields), restart_or_absent
            )

        while True:
            token = listed["token"]
            answer = page(query + [("continue", token)] if token else query)
            if answer is expired:
                listed.update(items=[], token=None, restarts=listed["restarts"] + 1)
                continue
            listed["items"].extend(answer.get("items") or [])
            listed["token"] = (answer.get("metadata") or {}).get("continue")
            if not listed["token"]:
                return listed["items"]

    # Writes: each predicts in check mode and sends nothing -----------------------------------

    def _send(self, call):
        self.mutations += 1
        return call().to_dict()

    def create(self, definition):
        """Create ``definition``; in check mode return it as the prediction.

        A 409 reads the object back: when it holds every field sent (an earlier attempt's reply was
        lost after the server committed it, or an identical object was made meanwhile) it is the
        result; when it differs, a conflict names the fields; when it is not there, the create is
        sent again. A definition with only ``generateName`` carries a per-request label
        (``CREATE_REQUEST_LABEL``), so a retry after a lost reply finds the object the server named
        instead of making a second one.
        """
        meta = definition.get("metadata") or {}
        kind, name, namespace = definition.get("kind"), meta.get("name"), meta.get("namespace")
        if self.check_mode:
            return copy.deepcopy(definition)
        api_version = definition["apiVersion"]
        res = self.resource(api_version, kind)
        what = ref(kind, name or "%s*" % (meta.get("generateName") or ""), namespace)
        marker = None
        if not name:
            marker = "%016x" % random.getrandbits(64)
            definition = copy.deepcopy(definition)
            definition["metadata"].setdefault("labels", {})[CREATE_REQUEST_LABEL] = marker

        def read_back(exc, attempts):
            if marker is not None:
                if not is_transient(exc) and status_code(exc) != 409:
                    return None
                found = self.list(
                    api_version, kind, namespace, label_selector="%s=%s" % (CREATE_REQUEST_LABEL, marker)
                )
                return (True, found[0]) if found else (False, None)
            if status_code(exc) != 409:
                return None
            current = self.fetch(api_version, kind, name, namespace)
            if current is None:
                return False, None  # refused before it was written, or deleted since: send it again
            differ = differences(sent_fields(definition), current)
            if not differ:
                return True, current
            raise KubeError(
                "create %s: it already exists and is not the object this run sent (it differs at %s)%s; "
                "it was made by something else: remove it or choose another name"
                % (what, ", ".join(differ[:10]), attempts.note()),
                reason="AlreadyExists",
                status=409,
                conflict=differ,
                existing=current,
            )

        created = self._retrying(
            "create %s" % what,
            lambda: self._send(
                lambda: res.create(body=definition, namespace=namespace if res.namespaced else None)
            ),
            read_back,
        )
        self.written.append("created %s" % ref(kind, (created.get("metadata") or {}).get("name"), namespace))
        return created

    def patch(self, api_version, kind, name, namespace, patch, before=None):
        """Merge-patch an object. Returns ``(after, changed)``; no request when nothing would change.

        A 409 or a lost reply re-reads the object and re-applies the patch (a merge patch is
        idempotent); when the object already shows the patch, that is the result. A patch that
        carries ``metadata.resourceVersion`` is a guarded write: when the object moved on, the 409
        is raised for the caller to decide on newer data.
        """
        if before is None:
            before = self.get(api_version, kind, name, namespace)
        predicted = merge_patch(before, patch)
        if before is not None and same_object(before, predicted):
            return before, False
        if self.check_mode:
            return predicted, True
        res = self.resource(api_version, kind)
        guard = ((patch.get("metadata") or {}) if isinstance(patch, dict) else {}).get("resourceVersion")
        state = {"sent": 0}

        def send():
            state["sent"] += 1
            return self._send(
                lambda: res.patch(
                    body=patch,
                    name=name,
                    namespace=namespace if res.namespaced else None,
                    content_type=MERGE_PATCH,
                )
            )

        def reread(exc, _attempts):
            code = status_code(exc)
            if code != 409 and not (is_transient(exc) and state["sent"]):
                return None
            current = self.fetch(api_version, kind, name, namespace)
            if current is None:
                return None
            if same_object(current, merge_patch(current, patch)):
                return True, current  # the patch shows: an earlier attempt committed it
            if guard and (current.get("metadata") or {}).get("resourceVersion") != guard:
                return None  # a guarded write on an object that moved on: the caller decides
            return False, None

        after = self._retrying("patch %s" % ref(kind, name, namespace), send, reread)
        changed = not same_object(before, after)
        if changed:
            self.written.append("patched %s" % ref(kind, name, namespace))
        return after, changed

    def replace(self, definition, before=None):
        """Replace an object (optimistic: uses ``before``'s resourceVersion). Returns ``(after, changed)``.

        A 409 re-reads the object: when it already equals the definition (an earlier attempt
        committed), that is the result, otherwise the replace is sent again on the new
        resourceVersion. A definition that names its own resourceVersion is a guarded write: a 409 on
        an object that moved on is raised.
        """
        meta = definition.get("metadata") or {}
        kind, name, namespace = definition.get("kind"), meta.get("name"), meta.get("namespace")
        api_version = definition["apiVersion"]
        if before is None:
            before = self.get(api_version, kind, name, namespace)
        guard = meta.get("resourceVersion")
        desired = copy.deepcopy(definition)
        if before is not None:
            if same_object(before, desired):
                return before, False
            desired.setdefault("metadata", {}).setdefault(
                "resourceVersion", (before.get("metadata") or {}).get("resourceVersion")
            )
        if self.check_mode:
            return desired, True
        res = self.resource(api_version, kind)

        def send():
            return self._send(
                lambda: res.replace(body=desired, name=name, namespace=namespace if res.namespaced else None)
            )

        def reread(exc, _attempts):
            if status_code(exc) != 409 and not is_transient(exc):
                return None
            current = self.fetch(api_version, kind, name, namespace)
            if current is None:
                return None
            if same_object(current, definition):
                return True, current
            version = (current.get("metadata") or {}).get("resourceVersion")
            if guard and version != guard:
                return None
            desired["metadata"]["resourceVersion"] = version
            return False, None

        after = self._retrying("replace %s" % ref(kind, name, namespace), send, reread)
        changed = not same_object(before, after)
        if changed:
            self.written.append("replaced %s" % ref(kind, name, namespace))
        return after, changed

    def delete(self, api_version, kind, name, namespace=None, before=None, propagation=None):
        """Delete an object. Returns True when it existed (and, outside check mode, was deleted).

        ``propagation`` is the propagationPolicy (``Background``, ``Foreground``, ``Orphan``). A 404
        after an earlier attempt was sent means that attempt deleted it: done.
        """
        if before is None:
            before = self.get(api_version, kind, name, namespace)
        if before is None:
            return False
        if self.check_mode:
            return True
        res = self.resource(api_version, kind)
        extra = {"body": {"propagationPolicy": propagation}} if propagation else {}

        def send():
            self.mutations += 1
            res.delete(name=name, namespace=namespace if res.namespaced else None, **extra)
            return True

        def gone(exc, _attempts):
            if status_code(exc) == 404:
                return True, True  # it existed when read; an earlier attempt (ours or the client's) took it
            if status_code(exc) == 409:
                return False, None
            return None

        deleted = self._retrying("delete %s" % ref(kind, name, namespace), send, gone)
        self.written.append("deleted %s" % ref(kind, name, namespace))
        return deleted

    def delete_and_wait(
        self, api_version, kind, name, namespace, timeout, sleep, before=None, propagation=None, progress=None
    ):
        """Delete, then wait until the object is gone. Returns whether it existed.

        A timeout raises ``WaitTimeout`` naming the object and what still holds it (finalizers,
        deletionTimestamp). Check mode sends nothing and does not wait.
        """
        existed = self.delete(api_version, kind, name, namespace, before=before, propagation=propagation)
        if not existed or self.check_mode:
            return existed
        self.wait(
            api_version,
            kind,
            name,
            namespace,
            lambda obj: (obj is None, None),
            describe_deleting,
            "%s to be deleted" % ref(kind, name, namespace),
            timeout,
            sleep,
            progress=progress,
        )
        return True

    # Raw requests: subresources and uploads that the dynamic client does not model ----------------

    def request(
        self,
        method,
        path,
        query=None,
        headers=None,
        body=None,
        base_url=None,
        timeout=None,
        retry=None,
        mutating=None,
        action=None,
    ):
        """Send one HTTP request with the cluster's credentials; return the streaming response.

        ``path`` is appended to ``base_url`` (default: the API server). ``body`` is bytes, a file
        object, an iterable of bytes, or a callable returning one of these (called again for each
        attempt, so a retried upload starts from the beginning). The response is not read: iterate
        ``stream_to`` or ``response.stream()`` and close it (it is a context manager). A non-2xx answer
        raises ``KubeError`` with the server's Status, its message starting with ``action`` (default:
        the method and URL without its query). GET and HEAD are retried on transient errors; other
        methods only with ``retry=True`` (a body given as a callable).
        """
        import urllib3

        api = self.api_client
        method = method.upper()
        if retry is None:
            retry = method in ("GET", "HEAD")
        if mutating is None:
            mutating = method not in ("GET", "HEAD")
        url = (base_url or api.configuration.host).rstrip("/") + path
        params = list(query or [])
        if params:
            from urllib.parse import urlencode

            url += "?" + urlencode(params)
        if timeout is not None and not isinstance(timeout, urllib3.Timeout):
            timeout = urllib3.Timeout(connect=min(timeout, 30), read=timeout)

        action = action or "%s %s" % (method, strip_query(url))

        def send():
            data = body() if callable(body) else body
            response = self._pool_request(api, method, url, headers, data, timeout, mutating)
            if mutating:
                self.written.append("sent %s" % action)
            return response

        if retry:
            return self._retrying(action, send)
        try:
            return send()
        except Exception as exc:
            if not undecided(exc):
                raise
            raise KubeError.from_exception(action, exc) from exc

    def _pool_request(self, api, method, url, headers, data, timeout, mutating):
        """One attempt on the client's connection pool with its credentials; non-2xx raises ApiException
        (``ApiError`` on a ``RawConnection``). The client's default headers (impersonation) are sent."""
        import urllib3

        sent = urllib3.HTTPHeaderDict(getattr(api, "default_headers", None) or {})
        for name, value in (headers or {}).items():
            sent[name] = value
        api.update_params_for_auth(sent, [], ["BearerToken"])
        if mutating:
            self.mutations += 1
        response = api.rest_client.pool_manager.request(
            method,
            url,
            body=data,
            headers=sent,
            preload_content=False,
            timeout=timeout,
            retries=False,
            redirect=False,
        )
        if not 200 <= response.status < 300:
            try:
                data = response.read(STREAM_CHUNK)
                if isinstance(api, RawConnection):
                    raise api.error(response, data)
                from kubernetes.client.exceptions import ApiException

                raise ApiException(http_resp=_ErrorResponse(response, data))
            finally:
                response.release_conn()
        return response

    def download(self, path, handle, query=None, headers=None, timeout=None, limit=None, action=None):
        """GET ``path`` into the open binary ``handle`` chunk by chunk; returns the bytes written.

        Never holds more than one chunk in memory; ``limit`` (bytes) stops a runaway answer.
        """
        action = action or "GET %s" % path
        response = self.request("GET", path, query=query, headers=headers, timeout=timeout, action=action)
        written, whole = 0, False
        try:
            for chunk in response.stream(STREAM_CHUNK):
                written += len(chunk)
                if limit is not None and written > limit:
                    raise PipelineError(
                        "%s: the answer is larger than %d bytes; not reading on" % (action, limit)
                    )
                handle.write(chunk)
            whole = True
        except Exception as exc:
            if not undecided(exc):
                raise
            raise KubeError.from_exception(action, exc) from exc
        finally:
            if not whole:
                # A connection with the rest of an answer still on it must not go back to the pool: the
                # next request would read that rest as its own answer.
                response.close()
            response.release_conn()
        return written

    def upload(
        self,
        method,
        path,
        src,
        field=None,
        query=None,
        headers=None,
        base_url=None,
        timeout=None,
        action=None,
        progress=None,
    ):
        """Send the file ``src`` as the body (or as the multipart form field ``field``), streamed.

        The Content-Length is computed up front, so the file is never read into memory. Returns the
        response's JSON (or text, or None when empty). Not retried: an upload is not idempotent.
        ``progress(sent, size)`` is called after each chunk of the file is handed to the connection.
        """
        import os

        size = os.path.getsize(src)
        sent = dict(headers or {})
        if field:
            boundary = "goldenimage-%s" % "".join(random.choice("0123456789abcdef") for _digit in range(24))
            opening = (
                '--%s\r\nContent-Disposition: form-data; name="%s"; filename="%s"\r\n'
                "Content-Type: application/octet-stream\r\n\r\n" % (boundary, field, os.path.basename(src))
            ).encode()
            closing = ("\r\n--%s--\r\n" % boundary).encode()
            sent["Content-Type"] = "multipart/form-data; boundary=%s" % boundary
            length = len(opening) + size + len(closing)
        else:
            opening = closing = b""
            sent.setdefault("Content-Type", "application/octet-stream")
            length = size
        sent["Content-Length"] = str(length)

        def chunks():
            yield opening
            sent_bytes = 0
            with open(src, "rb") as handle:
                while True:
                    block = handle.read(STREAM_CHUNK)
                    if not block:
                        break
                    yield block
                    sent_bytes += len(block)
                    if progress is not None:
                        progress(sent_bytes, size)
            yield closing

        response = self.request(
            method,
            path,
            query=query,
            headers=sent,
            body=chunks,
            base_url=base_url,
            timeout=timeout,
            action=action,
        )
        try:
            data = response.read()
        finally:
            response.release_conn()
        return _parse_body(data) if data else None

    # Waits -----------------------------------------------------------------------------------

    def wait(
        self,
        api_version,
        kind,
        name,
        namespace,
        predicate,
        describe,
        pending,
        timeout,
        sleep,
        progress=None,
        rounds=None,
    ):
        """Poll one object until ``predicate`` holds; returns ``(obj, duration)``; raises WaitError.

        Throttling, 5xx and dropped connections during the poll are ridden out, not fatal; any other
        failed read raises ``KubeError`` naming the object. With ``rounds`` it is this round's share of
        the wait (``_wait.wait_for``): ``(obj, None)`` when the round ends first.
        """

        def fetch():
            try:
                return self._read(api_version, kind, name, namespace)
            except Exception as exc:
                if is_transient(exc) or not undecided(exc):
                    raise
                raise KubeError.from_exception("get %s" % ref(kind, name, namespace), exc) from exc

        return wait_for(
            fetch,
            predicate,
            timeout,
            sleep,
            describe=describe,
            progress=progress,
            pending=pending,
            transient=is_transient,
            first_sleep=FIRST_POLL,
            rounds=rounds,
        )

    def wait_round(
        self, rounds, api_version, kind, name, namespace, predicate, describe, pending, sleep, progress=None
    ):
        """``wait`` for this round's share only: ``(obj, True)`` once ``predicate`` holds, ``(obj, False)``
        when the round is over first (the caller reports and returns ``rounds.resume()``). The time-out of
        the whole wait, counted from ``rounds.started`` across rounds, raises ``WaitTimeout``."""
        obj, seconds = self.wait(
            api_version,
            kind,
            name,
            namespace,
            predicate,
            describe,
            pending,
            rounds.timeout,
            sleep,
            progress,
            rounds,
        )
        return obj, seconds is not None


class _ErrorResponse(object):
    """What ``ApiException(http_resp=...)`` reads, from a raw urllib3 response already read."""

    def __init__(self, response, data):
        self.status = response.status
        self.reason = response.reason
        self.data = data
        self._headers = response.headers

    def getheaders(self):
        return self._headers

    def getheader(self, name, default=None):
        return self._headers.get(name, default)


def describe_deleting(obj):
    """A deleting object's state: gone, or what still holds it."""
    if obj is None:
        return "deleted"
    meta = obj.get("metadata") or {}
    finalizers = meta.get("finalizers") or []
    if meta.get("deletionTimestamp"):
        held = "; finalizers: %s" % ", ".join(finalizers) if finalizers else ""
        return "deletion requested at %s%s" % (meta["deletionTimestamp"], held)
    return "still present (no deletion requested)"
