# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The one-line summary of a harvester_upload run, from its ``harvester_upload_result``."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def _truthy(value):
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1")
    return bool(value)


def upload_summary(result):
    """The line for ``harvester_upload_result``: ``"<revision>: <where the bytes went>; VirtualMachineImage
    <ns>/<name> <state>, progress N%, StorageClass <class> with <n> replicas; catalog <state>"``."""
    result = result or {}
    if result.get("source") == "bucket":
        moved = (
            "uploaded (%s bytes)" % result.get("bytes_moved", 0)
            if _truthy(result.get("uploaded"))
            else "already there, skipped"
        )
        where = "s3://%s/%s %s, read by %s URL" % (
            result.get("bucket", ""),
            result.get("key", ""),
            moved,
            result.get("url_mode", ""),
        )
    else:
        where = "uploaded straight to Harvester"
    image = result.get("image") or {}
    replicas = result.get("replicas_in_force")
    return (
        "%s: %s; VirtualMachineImage %s/%s %s, progress %s%%, StorageClass %s with %s replicas; catalog %s"
        % (
            result.get("revision", ""),
            where,
            image.get("namespace", ""),
            image.get("name", ""),
            "registered or updated" if _truthy(result.get("registered")) else "unchanged",
            result.get("progress", 0),
            result.get("storage_class") or "-",
            replicas if replicas not in (None, "", "None") else "?",
            "updated" if _truthy(result.get("catalog_changed")) else "unchanged",
        )
    )
