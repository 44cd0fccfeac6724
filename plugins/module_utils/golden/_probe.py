# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""TCP reachability, the one socket this collection opens; decides nothing.

Adapter: modules import no socket. The clone gate asks whether a guest's remote port accepts a
connection from where the controller stands; what that means for the verdict is ``gate``'s rule.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import socket


def tcp_connect(address, timeout):
    """None when ``(host, port)`` accepted a TCP connection within ``timeout`` seconds, else why not."""
    try:
        conn = socket.create_connection(address, timeout=timeout)
    except (OSError, socket.timeout) as exc:
        return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    conn.close()
    return None


def read_banner(address, timeout, limit=256):
    """``(data, None)``: the first bytes ``(host, port)`` sent after accepting a TCP connection (an SSH
    server sends its identification line unasked), within ``timeout`` seconds; ``(b"", why)`` when it
    did not connect or sent nothing."""
    try:
        conn = socket.create_connection(address, timeout=timeout)
    except (OSError, socket.timeout) as exc:
        return b"", getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    data = b""
    try:
        conn.settimeout(timeout)
        while b"\n" not in data and len(data) < limit:
            chunk = conn.recv(limit - len(data))
            if not chunk:
                break
            data += chunk
    except (OSError, socket.timeout) as exc:
        if not data:
            return b"", "connected, but no banner arrived (%s)" % (str(exc) or type(exc).__name__)
    finally:
        conn.close()
    return data, None
