# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Read the small files beside an artifact served over HTTP (its ``.sig`` and ``.intoto.jsonl``).

Adapter: I/O only, no decision. A file the server does not have reads as absent: 404, and 403, which S3
answers for a missing key to a reader that may not list the bucket (the one answer an anonymous reader of a
public-read mirror gets). Either way nothing is served to verify, and the verdict on an absent signature is
a refusal unless the policy relaxes the family. Any other failure is reported, never taken as absent.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.module_utils.urls import open_url

# A signature is under 200 bytes and an envelope a few KiB: anything larger is not one.
LIMIT = 1024 * 1024


def url_text(url, validate_certs=True, timeout=30):
    """``(text or None when the server has no such file, error text or None)`` of the file at ``url``."""
    try:
        response = open_url(
            url, method="GET", validate_certs=validate_certs, timeout=timeout, follow_redirects="safe"
        )
    except Exception as exc:  # any failure to ask is reported, never guessed around
        if getattr(exc, "code", None) in (403, 404):
            return None, None
        return None, "%s: %s" % (type(exc).__name__, exc)
    try:
        body = response.read(LIMIT + 1)
    finally:
        response.close()
    if len(body) > LIMIT:
        return None, "larger than %d bytes, not a signature or a provenance envelope" % LIMIT
    try:
        return body.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return None, "not UTF-8 text (%s)" % exc
