# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""OCI I/O: a layer written as a deterministic tar+gzip stream, an OCI image layout directory, and
a registry spoken to over the OCI distribution API (token or basic auth, TLS verified by default).

Nothing here decides what goes into an image: the member list and the documents come from
``microvm``; this file turns them into bytes, files and HTTP requests.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import hashlib
import json
import os
import re
import struct
import tarfile
import shutil
import tempfile
import time
import zlib

from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError
from ansible.module_utils.six.moves.urllib.parse import urlencode, urljoin
from ansible.module_utils.urls import open_url
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import _retry, retries
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError

CHUNK = 1024 * 1024
UPLOAD_CHUNK = 16 * 1024 * 1024
TAR_TYPES = {
    "file": tarfile.REGTYPE,
    "dir": tarfile.DIRTYPE,
    "symlink": tarfile.SYMTYPE,
    "hardlink": tarfile.LNKTYPE,
    "char": tarfile.CHRTYPE,
    "block": tarfile.BLKTYPE,
    "fifo": tarfile.FIFOTYPE,
}
USTAR_MAGIC = b"ustar\x0000"
USTAR_ID_LIMIT = 8**7
USTAR_NUMBER_LIMIT = 8**11
CHECKSUM_SPACES = b" " * 8
NO_DEVICES = bytes(16)
NO_OWNER_NAMES = bytes(64)
HEADER_TAIL = bytes(155 + 12)  # the empty prefix field and the block's padding
# gzip header: magic, deflate, no flags, mtime 0, no extra flags, OS "unknown": the same bytes every run.
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


class RegistryError(PipelineError):
    """A registry request failed; the message names the request and the status."""


class _GzipSink:
    """A write-only file that gzips what it gets, digests both streams and optionally stores the result."""

    def __init__(self, out, level):
        self.out = out
        self.raw = hashlib.sha256()
        self.packed = hashlib.sha256()
        self.raw_size = 0
        self.packed_size = 0
        self.crc = 0
        self.deflate = zlib.compressobj(level, zlib.DEFLATED, -15, 9)
        self._emit(GZIP_HEADER)

    def _emit(self, data):
        if data:
            self.packed.update(data)
            self.packed_size += len(data)
            if self.out is not None:
                self.out.write(data)

    def write(self, data):
        self.raw.update(data)
        self.crc = zlib.crc32(data, self.crc)
        self.raw_size += len(data)
        self._emit(self.deflate.compress(data))
        return len(data)

    def tell(self):
        return self.raw_size

    def finish(self):
        self._emit(self.deflate.flush())
        self._emit(struct.pack("<II", self.crc & 0xFFFFFFFF, self.raw_size & 0xFFFFFFFF))


def _tarinfo(member):
    info = tarfile.TarInfo(member["name"])
    info.type = TAR_TYPES[member["type"]]
    info.mode = member["mode"]
    info.uid = member["uid"]
    info.gid = member["gid"]
    info.uname = ""
    info.gname = ""
    info.mtime = member["mtime"]
    info.size = member["size"] if member["type"] == "file" else 0
    info.linkname = member["linkname"]
    if member["type"] in ("char", "block"):
        info.devmajor, info.devminor = member["rdev"]
    if member["xattrs"]:
        info.pax_headers = dict(
            ("SCHILY.xattr." + name, value.decode("utf-8", "surrogateescape"))
            for name, value in sorted(member["xattrs"].items())
        )
    return info


class _Exact:
    """Exactly ``size`` bytes of a file: a file that changed size under us is an error, not a short tar."""

    def __init__(self, fh, size, name):
        self.fh = fh
        self.left = size
        self.name = name

    def read(self, size=-1):
        size = self.left if size < 0 else min(size, self.left)
        data = self.fh.read(size)
        if len(data) < size:
            raise PipelineError(
                "/%s: the filesystem gave %d bytes fewer than its size" % (self.name, size - len(data))
            )
        self.left -= len(data)
        return data


def _octal(value, digits):
    return b"%0*o\x00" % (digits - 1, value)


def _ustar(member):
    """The 512-byte header tarfile writes in PAX format for a member that needs no extended header
    (ASCII names up to 100 bytes, numbers that fit, no xattrs), built directly; None for any other
    member, whose header tarfile builds (``_tarinfo(...).tobuf``). Same bytes either way
    (tests/unit/plugins/module_utils/test_oci_tar.py)."""
    kind = member["type"]
    name = member["name"]
    if kind == "dir" and not name.endswith("/"):
        name += "/"
    link = member["linkname"]
    size = member["size"] if kind == "file" else 0
    uid, gid, mtime = member["uid"], member["gid"], member["mtime"]
    if (
        member["xattrs"]
        or len(name) > 100
        or len(link) > 100
        or not name.isascii()
        or not link.isascii()
        or not (0 <= uid < USTAR_ID_LIMIT and 0 <= gid < USTAR_ID_LIMIT)
        or not (0 <= size < USTAR_NUMBER_LIMIT and 0 <= mtime < USTAR_NUMBER_LIMIT)
    ):
        return None
    if kind in ("char", "block"):
        devices = _octal(member["rdev"][0], 8) + _octal(member["rdev"][1], 8)
    else:
        devices = NO_DEVICES
    head = b"".join(
        (
            name.encode("ascii").ljust(100, b"\x00"),
            _octal(member["mode"] & 0o7777, 8),
            _octal(uid, 8),
            _octal(gid, 8),
            _octal(size, 12),
            _octal(mtime, 12),
            CHECKSUM_SPACES,
            TAR_TYPES[kind],
            link.encode("ascii").ljust(100, b"\x00"),
            USTAR_MAGIC,
            NO_OWNER_NAMES,
            devices,
            HEADER_TAIL,
        )
    )
    return head[:148] + b"%06o\x00" % sum(head) + head[155:]


def write_layer(members, opener, out=None, level=6, progress=None):
    """Write the tar+gzip layer of ``members``; returns ``{digest, size, diff_id, raw_size}``.

    ``opener(inum)`` returns a file object for a file member's data. ``out`` (a binary file) receives
    the compressed bytes; None only digests them (check mode writes nothing). The tar is tarfile's PAX
    format byte for byte; a file moves in reads of at most ``CHUNK`` bytes, and a small file goes to
    the compressor with its header in one piece.
    """
    sink = _GzipSink(out, level)
    last = time.monotonic()
    for done, member in enumerate(members, start=1):
        header = _ustar(member)
        if header is None:
            header = _tarinfo(member).tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
        size = member["size"] if member["type"] == "file" else 0
        if not size:
            sink.write(header)
        else:
            data = _Exact(opener(member["inum"]), size, member["name"])
            pad = -size % tarfile.BLOCKSIZE
            if size <= CHUNK:
                sink.write(b"".join((header, data.read(size), bytes(pad))))
            else:
                sink.write(header)
                left = size
                while left:
                    chunk = data.read(min(CHUNK, left))
                    sink.write(chunk)
                    left -= len(chunk)
                if pad:
                    sink.write(bytes(pad))
        if progress is not None and time.monotonic() - last >= 10:
            last = time.monotonic()
            progress(done, len(members), sink.raw_size)
    # The end of the archive as tarfile writes it: two zero blocks, then zeros to a whole record.
    end = 2 * tarfile.BLOCKSIZE
    end += -(sink.raw_size + end) % tarfile.RECORDSIZE
    sink.write(bytes(end))
    sink.finish()
    return {
        "digest": "sha256:" + sink.packed.hexdigest(),
        "size": sink.packed_size,
        "diff_id": "sha256:" + sink.raw.hexdigest(),
        "raw_size": sink.raw_size,
    }


def digest_of(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


# OCI image layout ---------------------------------------------------------------------------------


class Layout:
    """An OCI image layout directory (``oci-layout``, ``index.json``, ``blobs/sha256/``)."""

    def __init__(self, path):
        self.path = os.path.abspath(path)

    def exists(self):
        return os.path.isfile(os.path.join(self.path, "oci-layout"))

    def kind(self):
        """What is at the path: ``directory``, ``missing``, or what else (a file, a broken symlink)."""
        if os.path.isdir(self.path):
            return "directory"
        if os.path.isfile(self.path):
            return "a regular file"
        if os.path.lexists(self.path):
            return "a broken symlink" if os.path.islink(self.path) else "a special file"
        # A missing path under a file (a/file/oci) cannot be made a directory either.
        parent = os.path.dirname(self.path)
        while parent and not os.path.lexists(parent):
            parent = os.path.dirname(parent)
        if parent and not os.path.isdir(parent):
            return "under %s, which is not a directory" % parent
        return "missing"

    def listing(self):
        return sorted(os.listdir(self.path)) if os.path.isdir(self.path) else None

    def blob_path(self, digest):
        algorithm, hexdigest = digest.split(":", 1)
        return os.path.join(self.path, "blobs", algorithm, hexdigest)

    def has_blob(self, digest, size):
        path = self.blob_path(digest)
        return os.path.isfile(path) and os.path.getsize(path) == size

    def index_bytes(self):
        """The bytes of ``index.json``, or None when the layout has none."""
        path = os.path.join(self.path, "index.json")
        if not os.path.isfile(path):
            return None
        with open(path, "rb") as fh:
            return fh.read()

    def prepare(self):
        os.makedirs(os.path.join(self.path, "blobs", "sha256"), exist_ok=True)
        marker = os.path.join(self.path, "oci-layout")
        if not os.path.isfile(marker):
            self._atomic(marker, b'{"imageLayoutVersion":"1.0.0"}')

    def scratch(self):
        """A temporary file beside the layout, not in it: a run that fails while a layer is written
        leaves the layout as it was (``keep`` moves the file in once every layer is whole)."""
        fd, path = tempfile.mkstemp(
            prefix=".%s.partial-" % os.path.basename(self.path), dir=os.path.dirname(self.path)
        )
        return os.fdopen(fd, "wb"), path

    def keep(self, scratch_path, digest):
        self.prepare()
        final = self.blob_path(digest)
        if os.path.isfile(final):
            os.unlink(scratch_path)
        else:
            os.chmod(scratch_path, 0o644)
            shutil.move(scratch_path, final)  # a rename, or a copy when dest is another filesystem
        return final

    def put_bytes(self, data):
        digest = digest_of(data)
        if not self.has_blob(digest, len(data)):
            self.prepare()
            self._atomic(self.blob_path(digest), data)
        return digest

    def write_index(self, document, data):
        self.prepare()
        self._atomic(os.path.join(self.path, "index.json"), data)

    def _atomic(self, path, data):
        fd, tmp = tempfile.mkstemp(prefix=".partial-", dir=os.path.dirname(path))
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.rename(tmp, path)


# Registry -----------------------------------------------------------------------------------------


def _challenge(header):
    """``(scheme, {param: value})`` of a WWW-Authenticate header."""
    if not header:
        return None, {}
    scheme, _sep, rest = header.strip().partition(" ")
    return scheme.lower(), dict(re.findall(r'(\w+)="([^"]*)"', rest))


class Registry:
    """One registry host spoken to over the OCI distribution API."""

    def __init__(
        self,
        scheme,
        host,
        username=None,
        password=None,
        validate_certs=True,
        ca_bundle=None,
        timeout=60,
        log=None,
    ):
        self.base = "%s://%s" % (scheme, host)
        self.host = host
        self.username = username
        self.password = password
        self.validate_certs = validate_certs
        self.ca_bundle = ca_bundle
        self.timeout = timeout
        self.log = log or (lambda line: None)
        self.tokens = {}
        self.requests = 0
        self.retry = _retry.registry()

    # transport

    def _open(self, method, url, data=None, headers=None, auth=None):
        headers = dict(headers or {})
        if auth:
            headers["Authorization"] = auth
        self.requests += 1
        return open_url(
            url,
            data=data,
            headers=headers,
            method=method,
            validate_certs=self.validate_certs,
            ca_path=self.ca_bundle,
            timeout=self.timeout,
            follow_redirects="all",
            unredirected_headers=["Authorization"],
            force=True,
        )

    def _basic(self):
        raw = ("%s:%s" % (self.username, self.password)).encode("utf-8")
        return "Basic " + base64.b64encode(raw).decode("ascii")

    def _token(self, params, scope):
        realm = params.get("realm")
        if not realm:
            raise RegistryError("registry %s: a Bearer challenge without a realm" % self.host)
        query = {"service": params.get("service", ""), "scope": params.get("scope") or scope}
        url = realm + ("&" if "?" in realm else "?") + urlencode(query)
        auth = self._basic() if self.username else None
        if auth and not realm.startswith("https://"):
            raise RegistryError(
                "registry %s: the token service %s is plain HTTP and would receive the password; "
                "serve it over https" % (self.host, realm)
            )
        try:
            response = self._open("GET", url, auth=auth)
            body = json.loads(response.read().decode("utf-8"))
        except HTTPError as exc:
            raise RegistryError(
                "registry %s: the token service %s refused %s: HTTP %s"
                % (self.host, realm, "the credentials" if auth else "anonymous access", exc.code),
                status=exc.code,
            ) from exc
        except (URLError, OSError, ValueError) as exc:
            raise RegistryError("registry %s: token service %s: %s" % (self.host, realm, exc)) from exc
        token = body.get("token") or body.get("access_token")
        if not token:
            raise RegistryError("registry %s: the token service %s returned no token" % (self.host, realm))
        return "Bearer " + token

    def request(
        self, method, path, repository, data=None, headers=None, ok=(200, 201, 202, 204), missing_ok=False
    ):
        """One request with the auth the registry asks for; returns the response (or None for 404).

        It rides on the registry's retry policy (``_retry.registry()``): a 401 renews the credentials the
        challenge asks for, once, and sends it again; a read (GET, HEAD) rides out throttling, 5xx and a
        dropped connection. Any other failure raises ``RegistryError`` naming the request.
        """
        url = path if "://" in path else urljoin(self.base, path)
        scope = "repository:%s:pull,push" % repository
        where = "registry %s: %s %s" % (self.host, method, path.split("?")[0])
        sent = {"auth": self.tokens.get(scope)}

        def send():
            if hasattr(data, "seek"):
                data.seek(0)
            return self._open(method, url, data=data, headers=headers, auth=sent["auth"])

        def decide(exc, attempts):
            if not isinstance(exc, (URLError, OSError)):
                return None
            code = exc.code if isinstance(exc, HTTPError) else None
            if code == 404 and missing_ok:
                return (_retry.DONE, None)
            if retries.refreshes(code, attempts.refreshed, self.retry.refreshes):
                scheme, params = _challenge(exc.headers.get("WWW-Authenticate"))
                if scheme == "bearer":
                    sent["auth"] = self.tokens[scope] = self._token(params, scope)
                elif scheme == "basic" and self.username:
                    sent["auth"] = self.tokens[scope] = self._basic()
                else:
                    raise RegistryError(
                        "%s needs credentials (%s); set username and password"
                        % (where, scheme or "no challenge"),
                        status=401,
                    ) from exc
                return (_retry.REFRESH,)
            if retries.registry_repeats(method, code):
                hinted = retries.retry_after(exc.headers.get("Retry-After")) if code else None
                return (_retry.AGAIN, "HTTP %s" % code if code else type(exc).__name__, hinted)
            return (_retry.FAIL,)

        def give_up(exc, attempts):
            raise self._failure(where, exc, attempts.note()) from exc

        response = self.retry.run(send, decide, give_up)
        if response is not None and response.getcode() not in ok:
            raise RegistryError("%s: unexpected HTTP %s" % (where, response.getcode()))
        return response

    def _failure(self, where, exc, note):
        """The ``RegistryError`` of a request that failed for good: the status and what it means."""
        if not isinstance(exc, HTTPError):
            return RegistryError("%s: %s%s" % (where, exc, note))
        if exc.code == 401:
            if self.username:
                why = "the credentials of %s were refused; check username and password" % self.username
            else:
                why = "anonymous access is not allowed; set username and password"
            return RegistryError("%s: HTTP 401, %s%s" % (where, why, note), status=401)
        detail = ""
        try:
            detail = exc.read().decode("utf-8", "replace")[:300]
        except Exception:
            detail = ""
        return RegistryError("%s: HTTP %s %s%s" % (where, exc.code, detail.strip(), note), status=exc.code)

    # reads

    def reachable(self, repository):
        """Answers ``GET /v2/`` with the credentials it asks for: raises ``RegistryError`` when it is
        unreachable or refuses them (checked before anything is written)."""
        self.request("GET", "/v2/", repository)

    def _manifest(self, method, repository, reference, media_type):
        path = "/v2/%s/manifests/%s" % (repository, reference)
        return self.request(method, path, repository, headers={"Accept": media_type}, missing_ok=True)

    def manifest_digest(self, repository, tag, media_type):
        response = self._manifest("HEAD", repository, tag, media_type)
        if response is None:
            return None
        return response.headers.get("Docker-Content-Digest")

    def manifest(self, repository, reference, media_type):
        """The manifest bytes at a tag or digest, or None when there is none (a small document)."""
        response = self._manifest("GET", repository, reference, media_type)
        return None if response is None else response.read()

    def blob(self, repository, digest, limit=4 * 1024 * 1024):
        """A small blob's bytes (a signature payload, an envelope), checked against its digest."""
        response = self.request("GET", "/v2/%s/blobs/%s" % (repository, digest), repository)
        data = response.read(limit + 1)
        if len(data) > limit or digest_of(data) != digest:
            raise RegistryError(
                "registry %s: blob %s@%s is %s"
                % (
                    self.host,
                    repository,
                    digest,
                    "larger than %d bytes" % limit if len(data) > limit else "not the bytes its digest names",
                )
            )
        return data

    def has_blob(self, repository, digest):
        response = self.request("HEAD", "/v2/%s/blobs/%s" % (repository, digest), repository, missing_ok=True)
        return response is not None

    # writes

    def push_blob(self, repository, digest, size, path=None, data=None):
        """Upload one blob (from ``path`` or ``data``) unless the registry has it; True when uploaded."""
        short = digest.split(":", 1)[1][:12]
        if self.has_blob(repository, digest):
            self.log("blob %s@%s: already in the registry (%s bytes)" % (repository, short, size))
            return False
        response = self.request(
            "POST",
            "/v2/%s/blobs/uploads/" % repository,
            repository,
            headers={"Content-Length": "0"},
            data=b"",
        )
        location = urljoin(self.base, response.headers.get("Location"))
        started = time.monotonic()
        if data is not None:
            location = self._put(location, repository, digest, data)
        else:
            sent = 0
            with open(path, "rb") as fh:
                while True:
                    chunk = fh.read(UPLOAD_CHUNK)
                    if not chunk:
                        break
                    headers = {
                        "Content-Type": "application/octet-stream",
                        "Content-Range": "%d-%d" % (sent, sent + len(chunk) - 1),
                        "Content-Length": str(len(chunk)),
                    }
                    response = self.request("PATCH", location, repository, data=chunk, headers=headers)
                    location = urljoin(self.base, response.headers.get("Location") or location)
                    sent += len(chunk)
                    self.log(
                        "blob %s@%s: %.1f/%.1f MiB (%d%%), %.1f s"
                        % (
                            repository,
                            short,
                            sent / 1048576.0,
                            size / 1048576.0,
                            100 * sent // max(size, 1),
                            time.monotonic() - started,
                        )
                    )
            location = self._put(location, repository, digest, b"")
        self.log(
            "blob %s@%s: pushed %s bytes in %.1f s" % (repository, short, size, time.monotonic() - started)
        )
        return True

    def _put(self, location, repository, digest, data):
        joiner = "&" if "?" in location else "?"
        url = location + joiner + urlencode({"digest": digest})
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(len(data))}
        self.request("PUT", url, repository, data=data, headers=headers)
        return location

    def push_manifest(self, repository, tag, data, media_type):
        response = self.request(
            "PUT",
            "/v2/%s/manifests/%s" % (repository, tag),
            repository,
            data=data,
            headers={"Content-Type": media_type, "Content-Length": str(len(data))},
        )
        return response.headers.get("Docker-Content-Digest")
