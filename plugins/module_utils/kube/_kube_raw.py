# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The raw read path: reads (discovery, get, list, a pod's log) without the kubernetes client.

Why it exists: importing the ``kubernetes`` library and building its dynamic client costs seconds per
task, more than the read itself at small sizes, and most tasks only read. A read is one HTTP GET and a
JSON body, so it goes over urllib3 with the headers and TLS settings the client would have used
(resolved by ``_kube_auth``, the same way kubernetes.core resolves them). A write, or credentials of a
form ``_kube_auth`` does not resolve, builds the client as before.

The raw path's failures stand for the client's: ``ApiError`` for its ``ApiException`` (status, reason,
body, headers), ``ResourceNotFoundError`` for the dynamic client's error of that name, so the retry
layer and the callers read both paths alike.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube_auth import (
    NotRaw,
    auth_values,
    raw_settings,
)


class ApiError(PipelineError):
    """A non-2xx answer on the raw path, with what the client's ApiException carries.

    Like every error of the collection it is a ``PipelineError``, but one the retry layer still reads
    first (see ``undecided``): a 503 is ridden out, a 404 is "absent", exactly as for ApiException.
    """

    def __init__(self, status, reason, body, headers):
        super(ApiError, self).__init__("(%s)\nReason: %s" % (status, reason))
        self.status = status
        self.reason = reason
        self.body = body
        self.headers = headers


class ResourceNotFoundError(PipelineError):
    """The server does not serve (apiVersion, kind): named as the dynamic client names it, and read by
    the retry layer like the dynamic client's error of that name (``served`` answers False)."""


class RawConnection(object):
    """A urllib3 pool with the resolved credentials, shaped like the parts of ``ApiClient`` reads use:
    ``configuration.host``, ``update_params_for_auth``, ``default_headers``, ``rest_client.pool_manager``."""

    def __init__(self, settings):
        import ssl

        import urllib3

        urllib3.disable_warnings()  # as kubernetes.core does
        self.host = settings["host"]
        self.configuration = self
        self.rest_client = self
        self._authorization = settings.get("authorization")
        self.default_headers = urllib3.HTTPHeaderDict()
        for name, value in settings.get("headers") or []:
            self.default_headers.add(name, value)
        ca_certs = settings.get("ssl_ca_cert")
        if not ca_certs:
            try:
                import certifi

                ca_certs = certifi.where()
            except ImportError:
                ca_certs = None
        pool = dict(
            num_pools=4,
            maxsize=4,
            cert_reqs=ssl.CERT_REQUIRED if settings.get("verify_ssl", True) else ssl.CERT_NONE,
            ca_certs=ca_certs,
            cert_file=settings.get("cert_file"),
            key_file=settings.get("key_file"),
        )
        if settings.get("tls_server_name"):
            pool["server_hostname"] = settings["tls_server_name"]
        if settings.get("proxy"):
            self.pool_manager = urllib3.ProxyManager(
                proxy_url=settings["proxy"],
                proxy_headers=urllib3.util.make_headers(**(settings.get("proxy_headers") or {})),
                **pool,
            )
        else:
            self.pool_manager = urllib3.PoolManager(**pool)

    def update_params_for_auth(self, headers, _query, _settings):
        if self._authorization:
            headers["authorization"] = self._authorization

    def error(self, response, data):
        return ApiError(response.status, response.reason, data, response.headers)


class RawPath(object):
    """Where a kind lives, as discovery said: ``path(name, namespace)`` like the dynamic client's."""

    def __init__(self, prefix, plural, namespaced):
        self.prefix = prefix
        self.plural = plural
        self.namespaced = namespaced

    def path(self, name=None, namespace=None):
        base = self.prefix
        if self.namespaced and namespace:
            base = "%s/namespaces/%s" % (base, namespace)
        base = "%s/%s" % (base, self.plural)
        return "%s/%s" % (base, name) if name else base


def api_prefix(api_version):
    return "/api/%s" % api_version if "/" not in api_version else "/apis/%s" % api_version


def find_kind(resource_list, api_version, kind):
    """The ``RawPath`` of ``kind`` in an APIResourceList, or raise ``ResourceNotFoundError``."""
    for entry in (resource_list or {}).get("resources") or []:
        if entry.get("kind") == kind and "/" not in (entry.get("name") or "/"):
            return RawPath(api_prefix(api_version), entry["name"], bool(entry.get("namespaced")))
    raise unserved_kind(api_version, kind)


def unserved_kind(api_version, kind):
    wanted = "{'api_version': '%s', 'kind': '%s'}" % (api_version, kind)
    return ResourceNotFoundError("No matches found for %s" % wanted)


def connect(params):
    """The ``RawConnection`` for a module's auth options, or None when they need the kubernetes client
    (or the kubeconfig cannot be read: the client then reports it in its own words)."""
    try:
        return RawConnection(raw_settings(auth_values(params)))
    except NotRaw:  # a form the client resolves
        return None
    except Exception:  # an unreadable kubeconfig: the client reports it in its own words
        return None
