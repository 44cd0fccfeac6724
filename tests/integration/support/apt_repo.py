"""APT repositories on loopback for the rebuild check: real-format Release and Packages files, written
and signed in the test with a key made by gpg, served by a plain HTTP server."""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import lzma
import pathlib
import subprocess
import threading


class Signer:
    """A throw-away OpenPGP key in its own GNUPGHOME; ``keyring`` is its public key as gpgv reads it."""

    def __init__(self, home: pathlib.Path, uid: str):
        self.home = home
        home.mkdir(mode=0o700, parents=True)
        self.gpg("--quick-generate-key", uid, "ed25519", "sign", "never")
        self.keyring = home / "keyring.gpg"
        self.keyring.write_bytes(self.gpg("--export", capture=True))

    def gpg(self, *args: str, capture: bool = False) -> bytes:
        command = ["gpg", "--homedir", str(self.home), "--batch", "--yes", "--pinentry-mode", "loopback"]
        command += ["--passphrase", ""] + list(args)
        proc = subprocess.run(command, capture_output=True, check=True, timeout=120)
        return proc.stdout if capture else b""

    def clearsign(self, src: pathlib.Path, dest: pathlib.Path) -> None:
        self.gpg("--digest-algo", "SHA512", "--clearsign", "--output", str(dest), str(src))

    def detach(self, src: pathlib.Path, dest: pathlib.Path) -> None:
        self.gpg("--digest-algo", "SHA512", "--armor", "--detach-sign", "--output", str(dest), str(src))


def packages_text(packages: dict[str, str], arch: str = "amd64") -> str:
    paragraphs = []
    for name, version in sorted(packages.items()):
        paragraphs.append(
            f"Package: {name}\nArchitecture: {arch}\nVersion: {version}\nPriority: optional\n"
            f"Section: misc\nMaintainer: Test <test@example.invalid>\nInstalled-Size: 100\n"
            f"Filename: pool/main/{name[0]}/{name}/{name}_{version.split(':')[-1]}_{arch}.deb\n"
            f"Size: 1000\nSHA256: {hashlib.sha256((name + version).encode()).hexdigest()}\n"
            f"Description: {name} for tests\n"
        )
    return "\n".join(paragraphs)


def write_suite(
    root: pathlib.Path,
    suite: str,
    packages: dict[str, str],
    signer: Signer | None,
    style: str = "InRelease",
    compression: str = "xz",
    component: str = "main",
    arch: str = "amd64",
    release_suite: str | None = None,
) -> pathlib.Path:
    """dists/<suite>/ with its Packages index (plain and compressed) and a Release listing both; its
    ``Suite`` field is ``release_suite`` when given (a mirror serving a pocket under another directory)."""
    dist = root / "dists" / suite
    index_dir = dist / component / f"binary-{arch}"
    index_dir.mkdir(parents=True, exist_ok=True)
    plain = packages_text(packages, arch).encode()
    files = {"Packages": plain}
    if compression == "xz":
        files["Packages.xz"] = lzma.compress(plain)
    elif compression == "gz":
        files["Packages.gz"] = gzip.compress(plain)
    lines = []
    for name, data in files.items():
        (index_dir / name).write_bytes(data)
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data):>10} {component}/binary-{arch}/{name}")
    release = dist / "Release"
    release.write_text(
        f"Origin: Test\nLabel: Test\nSuite: {release_suite or suite}\nCodename: {suite.split('-')[0]}\n"
        f"Date: Tue, 01 Dec 2026 10:00:00 UTC\nArchitectures: {arch}\nComponents: {component}\n"
        f"Description: {suite} for tests\nSHA256:\n" + "\n".join(lines) + "\n"
    )
    if signer is not None and style == "InRelease":
        signer.clearsign(release, dist / "InRelease")
        release.unlink()
    elif signer is not None:
        signer.detach(release, dist / "Release.gpg")
    return dist


class Server:
    """A ThreadingHTTPServer serving ``root`` on 127.0.0.1; ``url`` is its base URL."""

    def __init__(self, root: pathlib.Path):
        handler = functools.partial(_Quiet, directory=str(root))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass
