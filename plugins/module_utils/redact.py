# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The one redaction helper: what of a URL may be stored or printed, and what never may.

Pure: no I/O. A URL reaches objects that outlive the run (bucket object metadata, the mirror and image
catalogs, VirtualMachineImage specs and their Events) and messages printed at every verbosity. The
rules: a URL carrying a password (``http://user:pass@host/…``) is refused where it is an input, with the
supported alternative named; every URL that is printed or stored goes through ``redact_url`` first, which
masks the user-info and the query parameters that carry signatures or tokens (a presigned URL is a
bearer credential until it expires).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64

from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import Refusal

MASK = "REDACTED"
# Query parameters that are credentials: SigV4 and SigV2 presigning, SAS and common token names.
SECRET_QUERY = frozenset(
    name.lower()
    for name in (
        "X-Amz-Signature",
        "X-Amz-Credential",
        "X-Amz-Security-Token",
        "Signature",
        "AWSAccessKeyId",
        "sig",
        "token",
        "access_token",
        "password",
        "passwd",
        "secret",
        "api_key",
        "apikey",
    )
)


def _netloc_without_userinfo(parts):
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal goes back in brackets
        host = "[%s]" % host
    return "%s:%d" % (host, parts.port) if parts.port else host


def credentials(url):
    """``(username, password)`` carried in the URL's user-info, or ``(None, None)``."""
    try:
        parts = urlsplit(url or "")
    except ValueError:
        return None, None
    return parts.username, parts.password


def signed(url):
    """True when the URL's query carries a signature or token (a presigned or tokenised URL)."""
    try:
        query = urlsplit(url or "").query
    except ValueError:
        return False
    return any(name.lower() in SECRET_QUERY for name, _value in parse_qsl(query, keep_blank_values=True))


def redact_url(url):
    """The URL as it may be printed or stored: user-info and secret query values masked."""
    if not url or not isinstance(url, str):
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "%s@%s" % (MASK, _netloc_without_userinfo(parts))
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(name.lower() in SECRET_QUERY for name, _value in pairs):
            query = urlencode(
                [(name, MASK if name.lower() in SECRET_QUERY else value) for name, value in pairs], safe="/:"
            )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def signed_query_values(value, shortest=4):
    """The secret query values of every URL in ``value`` (a string, or dicts and lists holding them), as
    they are written in the URL and decoded: what a module masks wherever it would echo ``value`` (a
    DataVolume's presigned source URL). Values shorter than ``shortest`` are left, as masking them would
    blank every such run of characters of the output."""
    found = set()
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for item in value:
            found.update(signed_query_values(item, shortest))
        return found
    if not isinstance(value, str) or "?" not in value:
        return found
    try:
        query = urlsplit(value).query
    except ValueError:
        return found
    for part in query.split("&"):
        name, _eq, written = part.partition("=")
        if unquote(name).lower() in SECRET_QUERY:
            found.update(form for form in (written, unquote(written)) if len(form) >= shortest)
    return found


def strip_query(url):
    """The URL without query or fragment: what to record for a presigned object URL."""
    parts = urlsplit(url)
    netloc = _netloc_without_userinfo(parts) if "@" in parts.netloc else parts.netloc
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def storable_url(url):
    """The form of a URL that may be stored or returned: a signed query dropped whole (its other
    parameters mean nothing without the signature), anything else as ``redact_url`` gives it."""
    if url and isinstance(url, str) and signed(url):
        return strip_query(url)
    return redact_url(url)


def refuse_credentials(url, option, alternative):
    """Refuse a URL input that carries a password: it would be stored and printed with the URL.

    ``alternative`` names the supported move (a Secret, a header, presigning). Returns the URL.
    """
    user, password = credentials(url)
    if user is not None or password is not None:
        raise Refusal(
            "option %s (%s)" % (option, redact_url(url)),
            "the URL carries credentials in its user-info, and a URL is stored and printed where no "
            "secret may be (object metadata, catalogs, image specs, events, logs)",
            alternative,
        )
    return url


def secret_forms(secret):
    """The forms a secret takes in output: raw, URL-quoted, base64 and JSON/YAML-escaped."""
    if not secret:
        return []
    forms = {
        secret,
        quote(secret, safe=""),
        base64.b64encode(secret.encode("utf-8")).decode("ascii"),
        secret.replace("\\", "\\\\").replace('"', '\\"'),
    }
    return sorted(forms, key=len, reverse=True)


def redact_text(text, secrets):
    """``text`` with every form of every secret masked (for messages built from foreign output)."""
    if not isinstance(text, str):
        return text
    for secret in secrets or ():
        for form in secret_forms(secret):
            if form:
                text = text.replace(form, MASK)
    return text
