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
import re
from urllib.parse import parse_qsl, quote, unquote, unquote_plus, urlencode, urlsplit, urlunsplit

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal

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


CREDENTIALS_RULE = (
    "the URL carries credentials in its user-info, and a URL is stored and printed where no secret may be "
    "(object metadata, catalogs, image specs, events, logs)"
)
# A URL inside free text (an error message, an object field): a scheme, ``://`` and no blank or quote.
URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


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


def redact_message(text):
    """``text`` with every URL in it redacted (foreign error text may quote a request URL)."""
    if not isinstance(text, str):
        return text
    return URL_IN_TEXT.sub(lambda match: redact_url(match.group(0)), text)


def redact_fields(value):
    """``value`` (a mapping, list or string, nested) with every URL in every string redacted.

    For objects that are printed: a DataVolume's spec, a diff. Returns a copy; ``value`` is unchanged.
    """
    if isinstance(value, dict):
        return {key: redact_fields(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_fields(item) for item in value]
    return redact_message(value)


def _spellings(value, decoded):
    """A secret as the URL carries it, decoded, and quoted again: the forms output may show it in."""
    return {form for form in (value, decoded, quote(decoded, safe="")) if form}


def url_secrets(url):
    """The parts of ``url`` that are secrets, each as the URL spells it, decoded and quoted: the user-info
    password and the values of the query parameters that carry signatures or tokens. A part already
    redacted (``MASK``) is no secret: masking it would blank every redacted URL of the output."""
    found = set()
    try:
        parts = urlsplit(url or "")
        password = parts.password
    except (TypeError, ValueError):
        return []
    if password and password != MASK:
        found.update(_spellings(password, unquote(password)))
    for pair in parts.query.split("&"):
        name, _sep, value = pair.partition("=")
        if value and value != MASK and unquote_plus(name).lower() in SECRET_QUERY:
            found.update(_spellings(value, unquote_plus(value)))
    return sorted(found)


def secrets_in(value):
    """The secrets (``url_secrets``) of every URL found in ``value``: a string, or mappings and lists of them.

    A module masks these in everything it returns, its invocation included, whichever option held the URL.
    """
    found = set()
    if isinstance(value, dict):
        for item in value.values():
            found.update(secrets_in(item))
    elif isinstance(value, (list, tuple)):
        for item in value:
            found.update(secrets_in(item))
    elif isinstance(value, str) and "://" in value:
        for match in URL_IN_TEXT.finditer(value):
            found.update(url_secrets(match.group(0)))
    return found


def refuse_credentials_in(value, subject, alternative, path=""):
    """``refuse_credentials`` for every URL in ``value`` (nested mappings and lists): the refusal names
    ``subject`` (``DataVolume ns/x``) and the field that holds the URL (``spec.source.http.url``)."""
    if isinstance(value, dict):
        for key, item in value.items():
            refuse_credentials_in(item, subject, alternative, "%s.%s" % (path, key) if path else str(key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            refuse_credentials_in(item, subject, alternative, "%s[%d]" % (path, index))
    elif isinstance(value, str) and "://" in value:
        for match in URL_IN_TEXT.finditer(value):
            user, password = credentials(match.group(0))
            if user is not None or password is not None:
                shown = "%s field %s (%s)" % (subject, path, redact_url(match.group(0)))
                raise Refusal(shown, CREDENTIALS_RULE, alternative)


def refuse_credentials(url, option, alternative):
    """Refuse a URL input that carries a password: it would be stored and printed with the URL.

    ``alternative`` names the supported move (a Secret, a header, presigning). Returns the URL.
    """
    user, password = credentials(url)
    if user is not None or password is not None:
        raise Refusal("option %s (%s)" % (option, redact_url(url)), CREDENTIALS_RULE, alternative)
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
