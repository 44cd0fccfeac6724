# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""APT metadata over HTTP, and gpgv: the I/O of ``baked_image_rebuild_due`` (the rules are apt_release's).

``release()`` fetches a suite's InRelease (or Release and Release.gpg), has gpgv check the signature
against the configured keyring and returns the text gpgv vouches for; ``index()`` fetches an index file
and returns its bytes, digest and size, and its text decompressed.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import gzip
import hashlib
import lzma
import os
import subprocess
import tempfile

from ansible.module_utils.urls import open_url
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked.apt_release import AptError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.redact import (
    redact_message,
    redact_url,
)

NOT_FOUND = (404, 410)


def fetch(url, timeout=60, validate_certs=True):
    """The body at ``url``, or None when the server says it is not there (404, 410)."""
    from ansible.module_utils.six.moves.urllib.error import HTTPError

    try:
        response = open_url(url, timeout=timeout, validate_certs=validate_certs, follow_redirects="safe")
        return response.read()
    except HTTPError as exc:
        if exc.code in NOT_FOUND:
            return None
        raise AptError(
            "GET %s: HTTP %s %s" % (redact_url(url), exc.code, exc.reason), refused=False
        ) from None
    except Exception as exc:
        raise AptError("GET %s: %s" % (redact_url(url), redact_message(str(exc))), refused=False) from None


def gpgv(keyring, signed, signature=None):
    """The text gpgv vouches for: run ``gpgv --keyring keyring`` on a clearsigned message (``signed``
    alone) or a detached ``signature`` of ``signed``; raises AptError with gpgv's words on a bad one."""
    with tempfile.TemporaryDirectory(prefix="apt-gpgv-") as tmp:
        data = os.path.join(tmp, "data")
        with open(data, "wb") as handle:
            handle.write(signed)
        command = ["gpgv", "--homedir", tmp, "--keyring", os.path.abspath(keyring)]
        if signature is None:
            out = os.path.join(tmp, "out")
            command += ["--output", out, data]
        else:
            sig = os.path.join(tmp, "data.gpg")
            with open(sig, "wb") as handle:
                handle.write(signature)
            command += [sig, data]
        try:
            proc = subprocess.run(command, capture_output=True, check=False, timeout=60)
        except OSError as exc:
            raise AptError(
                "gpgv cannot run (%s); install gpgv (package gpgv) on the controller" % exc
            ) from None
        if proc.returncode != 0:
            raise AptError(proc.stderr.decode("utf-8", "replace").strip() or "gpgv refused the signature")
        if signature is None:
            with open(out, "rb") as handle:
                return handle.read()
        return signed


def release(base, suite, keyring, allow_unsigned, timeout=60, validate_certs=True):
    """``(text, how)`` of a suite's Release, ``how`` being ``InRelease``, ``Release.gpg`` or ``unsigned``."""
    root = "%s/dists/%s" % (base.rstrip("/"), suite)
    where = "%s %s" % (redact_url(base), suite)
    inrelease = fetch(root + "/InRelease", timeout, validate_certs)
    if inrelease is not None and keyring:
        return _text(gpgv(keyring, inrelease), where), "InRelease"
    plain = fetch(root + "/Release", timeout, validate_certs)
    if plain is not None and keyring:
        signature = fetch(root + "/Release.gpg", timeout, validate_certs)
        if signature is not None:
            return _text(gpgv(keyring, plain, signature), where), "Release.gpg"
    if not allow_unsigned:
        found = (
            "InRelease" if inrelease is not None else ("Release" if plain is not None else "no Release file")
        )
        raise AptError(
            "%s: %s is not verified (%s); give keyring (the repository's signing key) or, for a mirror "
            "you trust otherwise, allow_unsigned: true"
            % (where, found, "no keyring configured" if not keyring else "no Release.gpg signature")
        )
    if plain is not None:
        return _text(plain, where), "unsigned"
    if inrelease is not None:
        from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked.apt_release import (
            clearsigned_text,
        )

        return clearsigned_text(_text(inrelease, where)), "unsigned"
    raise AptError("%s: neither InRelease nor Release exists under %s" % (where, redact_url(root)))


def _text(data, where):
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise AptError("%s: the Release file is not UTF-8 text" % where) from None


def index(base, suite, path, timeout=60, validate_certs=True):
    """``(sha256, size, text)`` of an index file under a suite, decompressed by its name."""
    url = "%s/dists/%s/%s" % (base.rstrip("/"), suite, path)
    data = fetch(url, timeout, validate_certs)
    if data is None:
        raise AptError(
            "%s: %s is listed in the Release file but missing (HTTP 404)" % (redact_url(url), path)
        )
    digest = hashlib.sha256(data).hexdigest()
    try:
        if path.endswith(".xz"):
            raw = lzma.decompress(data)
        elif path.endswith(".gz"):
            raw = gzip.decompress(data)
        else:
            raw = data
    except Exception as exc:
        raise AptError("%s: cannot decompress: %s" % (redact_url(url), exc)) from None
    return digest, len(data), raw.decode("utf-8", "replace")
