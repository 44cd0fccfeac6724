# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Read the sha256 a mirror bucket recorded for an object, with one HEAD request.

Adapter: I/O only, no decision. The OS mirror writes the digest of every object it publishes as the
object metadata ``sha256`` (sent back as the ``x-amz-meta-sha256`` header); an Image Factory or any
other server sends no such header, and the answer is then None.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.module_utils.urls import open_url

HEADER = "x-amz-meta-sha256"


def object_sha256(url, validate_certs=True, timeout=30):
    """``(sha256 hex or None, error text or None)`` of the object at ``url``."""
    try:
        response = open_url(
            url, method="HEAD", validate_certs=validate_certs, timeout=timeout, follow_redirects="safe"
        )
    except Exception as exc:  # any failure to ask is reported, never guessed around
        return None, "%s: %s" % (type(exc).__name__, exc)
    try:
        value = response.headers.get(HEADER)
    finally:
        response.close()
    return (value.strip().lower() if value else None), None
