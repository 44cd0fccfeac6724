# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Kubernetes credentials, resolved the way kubernetes.core resolves them.

The modules take kubernetes.core's auth options (its argument spec, reused, not copied); the client
path hands them to its client factory. The raw read path (``_kube_raw``) needs the same connection
without building that client, so this file resolves the options as the factory would: the module's
options, else the ``K8S_AUTH_*`` variables; host with api_key (or client cert and key) alone, else the
kubeconfig (the option, else ``KUBECONFIG``, else ``~/.kube/config``) and its context; the options then
override what the kubeconfig said. Only the common forms are resolved here; any other (an exec or
auth-provider user, username/password, the in-cluster service account, several files in
``KUBECONFIG``, ``no_proxy`` or a ``NO_PROXY`` variable with a proxy, ``persist_config``) raises
``NotRaw`` and the client is built as before, so its behaviour and its errors are kubernetes.core's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import copy
import os

from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC

RAW_FALLBACK_USER_KEYS = ("auth-provider", "exec")
# kubernetes.core's option -> the client's configuration name (its AUTH_ARG_MAP), in its order.
AUTH_OPTIONS = (
    ("kubeconfig", "kubeconfig"),
    ("context", "context"),
    ("host", "host"),
    ("api_key", "api_key"),
    ("username", "username"),
    ("password", "password"),
    ("validate_certs", "verify_ssl"),
    ("ca_cert", "ssl_ca_cert"),
    ("client_cert", "cert_file"),
    ("client_key", "key_file"),
    ("proxy", "proxy"),
    ("no_proxy", "no_proxy"),
    ("proxy_headers", "proxy_headers"),
    ("persist_config", "persist_config"),
)
BOOL_OPTIONS = ("validate_certs", "persist_config")
PROXY_HEADER_OPTIONS = (("proxy_basic_auth", False), ("basic_auth", False), ("user_agent", False))


def auth_argument_spec():
    """kubernetes.core's auth options (kubeconfig, context, host, api_key, proxy_headers, ...)."""
    return copy.deepcopy(AUTH_ARG_SPEC)


class NotRaw(Exception):
    """The credentials need the kubernetes client (the reason says which form); not an error."""


def auth_values(params, environ=None):
    """``{option: value}`` as kubernetes.core resolves them: the option, else ``K8S_AUTH_<OPTION>``
    (or ``K8S_AUTH_<CLIENT NAME>``), booleans read as it reads them."""
    environ = os.environ if environ is None else environ
    found = {}
    for option, alias in AUTH_OPTIONS:
        value = params.get(option)
        if value is not None:
            found[option] = value
            continue
        if option == "proxy_headers":
            headers = {}
            for key, _kind in PROXY_HEADER_OPTIONS:
                env_value = environ.get("K8S_AUTH_PROXY_HEADERS_%s" % key.upper())
                if env_value is not None:
                    headers[key] = env_value
            found[option] = headers
            continue
        env_value = environ.get("K8S_AUTH_%s" % option.upper()) or environ.get("K8S_AUTH_%s" % alias.upper())
        if env_value is not None:
            if option in BOOL_OPTIONS:
                env_value = env_value.lower() not in ("0", "false", "no")
            found[option] = env_value
    for option in ("impersonate_user", "impersonate_groups"):
        value = params.get(option)
        if value is None:
            value = environ.get("K8S_AUTH_%s" % option.upper())
            if value is not None and option == "impersonate_groups":
                value = [part for part in value.split(",") if part != ""]
        if value:
            found[option] = value
    return found


def _named(entries, name, what):
    for entry in entries or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            return entry.get(what) or {}
    raise NotRaw("the kubeconfig names no %s %r" % (what, name))


def _file_or_data(section, key, base, temp):
    """A file path for ``key`` (or the base64 ``key-data``, written to a private temporary file)."""
    if "%s-data" % key in section:
        data = section["%s-data" % key]
        if not data:
            return None
        return temp(base64.standard_b64decode(data.encode() if isinstance(data, str) else data))
    if key in section:
        path = os.path.normpath(os.path.join(base, section[key]))
        if not os.path.isfile(path):
            raise NotRaw("the kubeconfig names a file that does not exist: %s" % path)
        return path
    return None


def kubeconfig_settings(config, path, context, temp):
    """What a kubeconfig (a dict; ``path`` its file or None) gives the client: host, token, TLS files."""
    if not isinstance(config, dict):
        raise NotRaw("the kubeconfig is not a mapping")
    name = context or config.get("current-context")
    if not name:
        raise NotRaw("the kubeconfig has no current-context")
    ctx = _named(config.get("contexts"), name, "context")
    cluster = _named(config.get("clusters"), ctx.get("cluster"), "cluster")
    user = _named(config.get("users"), ctx.get("user"), "user") if ctx.get("user") else {}
    base = os.path.abspath(os.path.dirname(path)) if path else ""
    settings = {}
    if "auth-provider" in user:
        raise NotRaw("the kubeconfig user has an auth-provider")
    if "token" in user:
        token = user["token"]
    elif "tokenFile" in user:
        token_path = os.path.normpath(os.path.join(base, user["tokenFile"]))
        with open(token_path) as handle:
            token = handle.read()
    else:
        token = None
    if token:
        settings["authorization"] = "Bearer %s" % token
    elif "exec" in user:
        raise NotRaw("the kubeconfig user runs an exec plugin")
    elif "username" in user and "password" in user:
        raise NotRaw("the kubeconfig user has a username and password")
    if "server" in cluster:
        settings["host"] = cluster["server"].rstrip("/")
        if settings["host"].startswith("https"):
            settings["ssl_ca_cert"] = _file_or_data(cluster, "certificate-authority", base, temp)
            settings["cert_file"] = _file_or_data(user, "client-certificate", base, temp)
            settings["key_file"] = _file_or_data(user, "client-key", base, temp)
    if "insecure-skip-tls-verify" in cluster:
        settings["verify_ssl"] = not cluster["insecure-skip-tls-verify"]
    if "tls-server-name" in cluster:
        settings["tls_server_name"] = cluster["tls-server-name"]
    return settings


def raw_settings(auth, environ=None, temp=None, read_yaml=None):
    """The connection settings kubernetes.core would build from ``auth`` (see ``auth_values``).

    Returns ``{host, authorization, verify_ssl, ssl_ca_cert, cert_file, key_file, tls_server_name,
    proxy, proxy_headers, headers}``; raises ``NotRaw`` for a form that needs the client.
    """
    environ = os.environ if environ is None else environ
    temp = temp or _private_file

    def given(*names):
        return all(auth.get(n) for n in names)

    if given("username", "password") or auth.get("persist_config"):
        raise NotRaw("username/password or persist_config")
    proxy = auth.get("proxy")
    if proxy and (auth.get("no_proxy") or environ.get("no_proxy") or environ.get("NO_PROXY")):
        raise NotRaw("a proxy with no_proxy")
    settings = {"host": "http://localhost", "verify_ssl": True}
    if given("host", "api_key") or given("host", "client_cert", "client_key"):
        pass
    elif given("kubeconfig") or given("context") or not environ.get("KUBERNETES_SERVICE_HOST"):
        config = auth.get("kubeconfig")
        if isinstance(config, dict):
            settings.update(kubeconfig_settings(config, None, auth.get("context"), temp))
        else:
            path = config or environ.get("KUBECONFIG") or "~/.kube/config"
            if not config and os.pathsep in path:
                raise NotRaw("KUBECONFIG names several files")
            path = os.path.expanduser(path)
            with open(path) as handle:
                loaded = (read_yaml or _yaml_load)(handle)
            settings.update(kubeconfig_settings(loaded, path, auth.get("context"), temp))
    else:
        raise NotRaw("the in-cluster service account")
    if auth.get("host"):
        settings["host"] = auth["host"].rstrip("/")
    if auth.get("api_key") is not None:
        settings["authorization"] = "Bearer %s" % auth["api_key"]
    for option, name in (
        ("validate_certs", "verify_ssl"),
        ("ca_cert", "ssl_ca_cert"),
        ("client_cert", "cert_file"),
        ("client_key", "key_file"),
    ):
        if auth.get(option) is not None:
            settings[name] = auth[option]
    if proxy:
        settings["proxy"] = proxy
        chosen = auth.get("proxy_headers") or {}
        settings["proxy_headers"] = {k: v for k, v in chosen.items() if v is not None}
    headers = []
    if auth.get("impersonate_user"):
        headers.append(("Impersonate-User", auth["impersonate_user"]))
    groups = auth.get("impersonate_groups") or []
    for group in [groups] if isinstance(groups, str) else groups:
        headers.append(("Impersonate-Group", group))
    settings["headers"] = headers
    return settings


def _yaml_load(handle):
    import yaml

    return yaml.safe_load(handle)


_TEMP_FILES = []


def _private_file(data):
    """A file only this user reads, holding ``data``; removed when the process ends."""
    import atexit
    import tempfile

    fd, path = tempfile.mkstemp(prefix="goldenimage-kube-")
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    if not _TEMP_FILES:
        atexit.register(_remove_temp_files)
    _TEMP_FILES.append(path)
    return path


def _remove_temp_files():
    while _TEMP_FILES:
        try:
            os.unlink(_TEMP_FILES.pop())
        except OSError:
            pass
