"""The lab's certificates: its self-signed serving certificate (also the CA of the client certificates it
issues) and the front-proxy CA of the aggregation layer, as a cluster's PKI has them (kubeadm's names).

- ``lab-ca.crt``: kube-apiserver's and the lab listener's serving certificate, valid for 127.0.0.1,
  localhost and ``virt-api.kubevirt.svc`` (the name kube-apiserver's aggregator verifies when it proxies
  KubeVirt's subresources to the listener); it is its own CA, and signs the kubelet client certificate.
- ``front-proxy-ca.crt``: the CA of the aggregator's client certificate (``front-proxy-client``), which
  an extension API server trusts to tell it the user in X-Remote-User.
"""

from __future__ import annotations

import datetime
import ipaddress
import pathlib
import ssl

# The names the lab's listener knows its callers by (kube-apiserver's flags carry the same).
FRONT_PROXY_CLIENT = "front-proxy-client"
KUBELET_CLIENT = "kube-apiserver-kubelet-client"
LAB_CA_NAME = "lab-apiserver"
FRONT_PROXY_CA_NAME = "lab-front-proxy-ca"
# KubeVirt's virt-api Service: the aggregator dials the APIService's service by this name.
VIRT_API_HOST = "virt-api.kubevirt.svc"


def _write(directory: pathlib.Path, stem: str, cert, key) -> tuple[pathlib.Path, pathlib.Path]:
    from cryptography.hazmat.primitives import serialization

    cert_path = directory / (stem + ".crt")
    key_path = directory / (stem + ".key")
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    key_path.chmod(0o600)
    return cert_path, key_path


def _builder(subject, issuer, public_key):
    from cryptography import x509

    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
    )


def _name(common_name: str, organizations: tuple[str, ...] = ()):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    return x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _self_signed(directory: pathlib.Path, stem: str, common_name: str, sans: list | None):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name)
    builder = _builder(name, name, key.public_key())
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    return _write(directory, stem, builder.sign(key, hashes.SHA256()), key)


def make_certificate(directory: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """Write lab-ca.crt (self-signed, valid for 127.0.0.1, localhost and virt-api.kubevirt.svc) and
    lab-ca.key."""
    from cryptography import x509

    sans = [
        x509.DNSName("localhost"),
        x509.DNSName(VIRT_API_HOST),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    return _self_signed(directory, "lab-ca", LAB_CA_NAME, sans)


def make_front_proxy_ca(directory: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """Write front-proxy-ca.crt and .key: the CA of the aggregator's client certificate only."""
    return _self_signed(directory, "front-proxy-ca", FRONT_PROXY_CA_NAME, None)


def issue_client_certificate(
    ca: tuple[pathlib.Path, pathlib.Path],
    directory: pathlib.Path,
    stem: str,
    common_name: str,
    organizations: tuple[str, ...] = (),
) -> tuple[pathlib.Path, pathlib.Path]:
    """A client certificate (``stem``.crt/.key) for ``common_name`` signed by the CA ``(cert, key)``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    ca_cert = x509.load_pem_x509_certificate(ca[0].read_bytes())
    ca_key = serialization.load_pem_private_key(ca[1].read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _builder(_name(common_name, organizations), ca_cert.subject, key.public_key())
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    return _write(directory, stem, cert, key)


def server_context(cert_path: pathlib.Path, key_path: pathlib.Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    return context


def listener_context(
    cert_path: pathlib.Path, key_path: pathlib.Path, client_cas: list[pathlib.Path]
) -> ssl.SSLContext:
    """The lab listener's context: a client certificate is asked for, not required (bearer-token clients
    and kube-apiserver's webhook calls send none); one that is sent must chain to ``client_cas``."""
    context = server_context(cert_path, key_path)
    for ca in client_cas:
        context.load_verify_locations(cafile=str(ca))
    context.verify_mode = ssl.CERT_OPTIONAL
    return context


def peer_names(peer: dict | None) -> tuple[str, str]:
    """``(subject CN, issuer CN)`` of a verified peer certificate (``SSLSocket.getpeercert()``)."""

    def common_name(rdns) -> str:
        for rdn in rdns or ():
            for key, value in rdn:
                if key == "commonName":
                    return value
        return ""

    if not peer:
        return "", ""
    return common_name(peer.get("subject")), common_name(peer.get("issuer"))
