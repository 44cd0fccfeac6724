"""The raw read path's credentials: resolved as kubernetes.core resolves them, or left to the client.

Each case builds kubernetes.core's own client configuration from the same options and compares what
a request would carry (host, Authorization, TLS verification, CA, client certificate, proxy).
"""

import base64
import os
import pathlib

import pytest
import yaml
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import _kube_auth, _kube_raw

CA = b"-----BEGIN CERTIFICATE-----\nlab-ca\n-----END CERTIFICATE-----\n"
CERT = b"-----BEGIN CERTIFICATE-----\nclient\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN PRIVATE KEY-----\nkey\n-----END PRIVATE KEY-----\n"


def kubeconfig(path, cluster, user, context="lab", extra_contexts=()):
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "lab", "context": {"cluster": "c", "user": "u"}}, *extra_contexts],
        "current-context": context,
    }
    path.write_text(yaml.safe_dump(config))
    return str(path)


def b64(data):
    return base64.b64encode(data).decode()


def client_view(auth, environ):
    """What kubernetes.core's configuration says a request carries, from the same auth values."""
    import kubernetes
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s import client

    # A fresh process's defaults: loading a kubeconfig makes it the client's process-wide default.
    kubernetes.client.Configuration.set_default(kubernetes.client.Configuration())
    # ... and its default kubeconfig is KUBECONFIG as it was when the client was imported.
    kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION = environ.get("KUBECONFIG", "~/.kube/config")
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(environ)
    try:
        spec = client._create_auth_spec(None, **auth)
        config = client._create_configuration(spec)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    auth_header = config.get_api_key_with_prefix("authorization")
    return {
        "host": config.host,
        "authorization": auth_header,
        "verify_ssl": config.verify_ssl,
        "ca": pathlib.Path(config.ssl_ca_cert).read_bytes() if config.ssl_ca_cert else None,
        "cert": pathlib.Path(config.cert_file).read_bytes() if config.cert_file else None,
        "key": pathlib.Path(config.key_file).read_bytes() if config.key_file else None,
        "proxy": config.proxy,
    }


def raw_view(auth, environ):
    settings = _kube_auth.raw_settings(_kube_auth.auth_values(auth, environ), environ)

    def read(name):
        return pathlib.Path(settings[name]).read_bytes() if settings.get(name) else None

    return {
        "host": settings["host"],
        "authorization": settings.get("authorization"),
        "verify_ssl": settings["verify_ssl"],
        "ca": read("ssl_ca_cert"),
        "cert": read("cert_file"),
        "key": read("key_file"),
        "proxy": settings.get("proxy"),
    }


def cases(tmp_path):
    (tmp_path / "ca.crt").write_bytes(CA)
    (tmp_path / "token").write_text("file-token")
    https = {"server": "https://10.0.0.1:6443/", "certificate-authority-data": b64(CA)}
    yield "token and CA data", {"kubeconfig": kubeconfig(tmp_path / "a", https, {"token": "t0k3n"})}, {}
    yield (
        "token file and CA file, relative to the kubeconfig",
        {
            "kubeconfig": kubeconfig(
                tmp_path / "b",
                {"server": "https://h:6443", "certificate-authority": "ca.crt"},
                {"tokenFile": "token"},
            )
        },
        {},
    )
    yield (
        "client certificate and key data",
        {
            "kubeconfig": kubeconfig(
                tmp_path / "c", https, {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY)}
            )
        },
        {},
    )
    yield (
        "insecure-skip-tls-verify",
        {
            "kubeconfig": kubeconfig(
                tmp_path / "d", {"server": "https://h", "insecure-skip-tls-verify": True}, {"token": "x"}
            )
        },
        {},
    )
    yield (
        "options override the kubeconfig",
        {
            "kubeconfig": kubeconfig(tmp_path / "e", https, {"token": "from-file"}),
            "api_key": "from-option",
            "host": "https://other:443/",
            "validate_certs": False,
            "ca_cert": str(tmp_path / "ca.crt"),
            "proxy": "http://proxy:3128",
        },
        {},
    )
    yield "host and api_key alone", {"host": "https://h:6443", "api_key": "k"}, {}
    yield (
        "K8S_AUTH_* variables",
        {},
        {
            "K8S_AUTH_KUBECONFIG": kubeconfig(tmp_path / "f", https, {"token": "env"}),
            "K8S_AUTH_VERIFY_SSL": "no",
        },
    )
    yield (
        "a context chosen by option",
        {
            "kubeconfig": kubeconfig(
                tmp_path / "g",
                https,
                {"token": "t"},
                context="other",
                extra_contexts=[{"name": "other", "context": {"cluster": "c", "user": "u"}}],
            ),
            "context": "lab",
        },
        {},
    )
    yield (
        "plain http: no CA",
        {"kubeconfig": kubeconfig(tmp_path / "h", {"server": "http://127.0.0.1:8080"}, {"token": "t"})},
        {},
    )
    yield (
        "KUBECONFIG when nothing is given",
        {},
        {"KUBECONFIG": kubeconfig(tmp_path / "i", https, {"token": "default"})},
    )


def test_the_raw_path_carries_what_the_client_would(tmp_path):
    for name, auth, environ in cases(tmp_path):
        assert raw_view(auth, environ) == client_view(auth, environ), name


@pytest.mark.parametrize(
    "user, auth, environ",
    [
        ({"exec": {"command": "get-token", "apiVersion": "client.authentication.k8s.io/v1"}}, {}, {}),
        ({"auth-provider": {"name": "oidc", "config": {}}, "token": "t"}, {}, {}),
        ({"username": "u", "password": "p"}, {}, {}),
        ({"token": "t"}, {"username": "u", "password": "p"}, {}),
        ({"token": "t"}, {"proxy": "http://p:3128", "no_proxy": "10.0.0.1"}, {}),
        ({"token": "t"}, {"proxy": "http://p:3128"}, {"NO_PROXY": "10.0.0.1"}),
        ({"token": "t"}, {"persist_config": True}, {}),
    ],
)
def test_forms_the_raw_path_does_not_do_are_left_to_the_client(tmp_path, user, auth, environ):
    path = kubeconfig(tmp_path / "config", {"server": "https://10.0.0.1"}, user)
    with pytest.raises(_kube_auth.NotRaw):
        _kube_auth.raw_settings(_kube_auth.auth_values(dict(auth, kubeconfig=path), environ), environ)


def test_in_cluster_and_several_kubeconfig_files_are_left_to_the_client(tmp_path):
    with pytest.raises(_kube_auth.NotRaw):
        _kube_auth.raw_settings({}, {"KUBERNETES_SERVICE_HOST": "10.96.0.1"})
    with pytest.raises(_kube_auth.NotRaw):
        _kube_auth.raw_settings({}, {"KUBECONFIG": "%s:%s" % (tmp_path / "a", tmp_path / "b")})


def test_impersonation_is_sent_as_headers(tmp_path):
    path = kubeconfig(tmp_path / "config", {"server": "https://h"}, {"token": "t"})
    settings = _kube_auth.raw_settings(
        _kube_auth.auth_values(
            {"kubeconfig": path, "impersonate_user": "alice", "impersonate_groups": ["dev", "ops"]}, {}
        ),
        {},
    )
    assert settings["headers"] == [
        ("Impersonate-User", "alice"),
        ("Impersonate-Group", "dev"),
        ("Impersonate-Group", "ops"),
    ]
    from_env = _kube_auth.auth_values({"kubeconfig": path}, {"K8S_AUTH_IMPERSONATE_GROUPS": "a,,b"})
    assert from_env["impersonate_groups"] == ["a", "b"]


def test_discovery_answers_map_to_paths():
    found = _kube_raw.find_kind(
        {
            "resources": [
                {"name": "volumesnapshots/status", "kind": "VolumeSnapshot", "namespaced": True},
                {"name": "volumesnapshots", "kind": "VolumeSnapshot", "namespaced": True},
                {"name": "volumesnapshotcontents", "kind": "VolumeSnapshotContent", "namespaced": False},
            ]
        },
        "snapshot.storage.k8s.io/v1",
        "VolumeSnapshot",
    )
    assert found.path() == "/apis/snapshot.storage.k8s.io/v1/volumesnapshots"
    assert found.path(namespace="p") == "/apis/snapshot.storage.k8s.io/v1/namespaces/p/volumesnapshots"
    assert found.path("g", "p") == "/apis/snapshot.storage.k8s.io/v1/namespaces/p/volumesnapshots/g"
    cluster = _kube_raw.find_kind(
        {"resources": [{"name": "namespaces", "kind": "Namespace"}]}, "v1", "Namespace"
    )
    assert cluster.path("x", "ignored") == "/api/v1/namespaces/x"
    with pytest.raises(_kube_raw.ResourceNotFoundError):
        _kube_raw.find_kind({"resources": []}, "v1", "Nothing")
