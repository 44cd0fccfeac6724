# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Baked image revision names and artifact file names.

Pure: no I/O. A revision is the build date, ``v<YYYYMMDD>``; builds of a stream other than the
naming default (22.04, the first stream) carry the stream without its dot as a suffix:
``v20260615`` is 22.04, ``v20261201-2404`` is 24.04. The suffix keeps two streams built on the same
day distinct in the catalog, where every revision ever built lives side by side.

The artifact of a revision is ``ubuntu-<stream without dot>-postgres-<revision>.qcow2``, e.g.
``ubuntu-2204-postgres-v20260615.qcow2`` and ``ubuntu-2404-postgres-v20261201-2404.qcow2``.

The naming default never follows the catalog's default OS stream: flipping the default stream must
not rename revisions that already exist.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import datetime
import re

DEFAULT_STREAM = "22.04"
ARTIFACT_PREFIX = "ubuntu-"
ARTIFACT_INFIX = "-postgres-"
ARTIFACT_EXTENSION = ".qcow2"

_STREAM = re.compile(r"^(\d{2})\.(\d{2})$")
_REVISION = re.compile(r"^v(\d{8})(?:-(\d{4}))?$")
_ARTIFACT = re.compile(r"^ubuntu-(\d{4})-postgres-(v\d{8}(?:-\d{4})?)\.qcow2$")

Revision = collections.namedtuple("Revision", ["name", "date", "os_stream", "suffixed"])
Revision.__doc__ = """A parsed revision: ``name`` as given, ``date`` (datetime.date), ``os_stream``
("24.04"), ``suffixed`` (True when the name carries the stream)."""


def validate_stream(os_stream):
    """Return the OS stream as text (``"22.04"``); refuse anything not shaped ``NN.NN``."""
    text = str(os_stream).strip() if os_stream is not None else ""
    if not _STREAM.match(text):
        raise ValueError("OS stream %r: expected an Ubuntu LTS version such as 22.04 or 24.04" % (os_stream,))
    return text


def stream_suffix(os_stream):
    """``"24.04"`` -> ``"2404"``."""
    return validate_stream(os_stream).replace(".", "")


def _stream_from_suffix(suffix):
    return "%s.%s" % (suffix[:2], suffix[2:])


def build_date(value):
    """A ``datetime.date`` from a date, ``YYYYMMDD`` or ``YYYY-MM-DD``; refuses impossible dates."""
    if isinstance(value, datetime.datetime):
        return value.date()
    if isinstance(value, datetime.date):
        return value
    text = str(value).strip().replace("-", "") if value is not None else ""
    if not re.match(r"^\d{8}$", text):
        raise ValueError("build date %r: expected YYYYMMDD or YYYY-MM-DD" % (value,))
    try:
        return datetime.date(int(text[:4]), int(text[4:6]), int(text[6:]))
    except ValueError as exc:
        raise ValueError("build date %r is not a calendar date: %s" % (value, exc)) from exc


def revision_name(date, os_stream, default_stream=DEFAULT_STREAM):
    """``v<YYYYMMDD>`` for the default stream, ``v<YYYYMMDD>-<stream without dot>`` otherwise."""
    day = build_date(date)
    stream = validate_stream(os_stream)
    name = "v" + day.strftime("%Y%m%d")
    if stream != validate_stream(default_stream):
        name += "-" + stream_suffix(stream)
    return name


def parse_revision(name, default_stream=DEFAULT_STREAM):
    """Parse a revision name into a ``Revision``; a name without suffix belongs to ``default_stream``."""
    text = str(name).strip() if name is not None else ""
    match = _REVISION.match(text)
    if not match:
        raise ValueError(
            "revision %r: expected v<YYYYMMDD> (default stream %s) or v<YYYYMMDD>-<stream without dot> "
            "such as v20261201-2404" % (name, default_stream)
        )
    day = build_date(match.group(1))
    suffix = match.group(2)
    if suffix is None:
        return Revision(text, day, validate_stream(default_stream), False)
    stream = _stream_from_suffix(suffix)
    if stream == validate_stream(default_stream):
        raise ValueError(
            "revision %r: the default stream %s is named without a suffix (v%s)"
            % (name, stream, match.group(1))
        )
    return Revision(text, day, stream, True)


def validate_revision(name, os_stream=None, default_stream=DEFAULT_STREAM):
    """Return the parsed ``Revision``; with ``os_stream`` also refuse a name of another stream."""
    rev = parse_revision(name, default_stream)
    if os_stream is not None:
        stream = validate_stream(os_stream)
        if rev.os_stream != stream:
            raise ValueError(
                "revision %s belongs to OS stream %s, not %s (the %s name would be %s)"
                % (rev.name, rev.os_stream, stream, stream, revision_name(rev.date, stream, default_stream))
            )
    return rev


def artifact_name(revision, os_stream=None, default_stream=DEFAULT_STREAM):
    """``ubuntu-<stream without dot>-postgres-<revision>.qcow2`` for a revision name.

    The stream comes from the revision; ``os_stream``, when given, must agree with it.
    """
    rev = validate_revision(revision, os_stream, default_stream)
    return "%s%s%s%s%s" % (
        ARTIFACT_PREFIX,
        stream_suffix(rev.os_stream),
        ARTIFACT_INFIX,
        rev.name,
        ARTIFACT_EXTENSION,
    )


def artifact_file_name(date, os_stream, default_stream=DEFAULT_STREAM):
    """The artifact file name for a build date and stream (``revision_name`` then ``artifact_name``)."""
    return artifact_name(revision_name(date, os_stream, default_stream), None, default_stream)


def parse_artifact_name(file_name, default_stream=DEFAULT_STREAM):
    """Parse an artifact file name back into its ``Revision``; the stream in the prefix must agree."""
    text = str(file_name).strip() if file_name is not None else ""
    match = _ARTIFACT.match(text)
    if not match:
        raise ValueError(
            "artifact %r: expected ubuntu-<stream without dot>-postgres-<revision>.qcow2, "
            "e.g. ubuntu-2204-postgres-v20260615.qcow2" % (file_name,)
        )
    return validate_revision(match.group(2), _stream_from_suffix(match.group(1)), default_stream)


def revision_sort_key(name, default_stream=DEFAULT_STREAM):
    """Order revisions by build date, then OS stream (oldest first)."""
    rev = parse_revision(name, default_stream)
    return (rev.date, tuple(int(p) for p in rev.os_stream.split(".")))


def sort_revisions(names, default_stream=DEFAULT_STREAM):
    """Revisions oldest first; an invalid name is refused rather than sorted somewhere arbitrary."""
    return sorted(names, key=lambda n: revision_sort_key(n, default_stream))


def latest_revision(names, os_stream=None, default_stream=DEFAULT_STREAM):
    """The newest revision, of ``os_stream`` only when given; ``None`` when there is none."""
    candidates = list(names)
    if os_stream is not None:
        stream = validate_stream(os_stream)
        candidates = [n for n in candidates if parse_revision(n, default_stream).os_stream == stream]
    if not candidates:
        return None
    return sort_revisions(candidates, default_stream)[-1]


def is_newer(candidate, current, default_stream=DEFAULT_STREAM):
    """True when ``candidate`` was built after ``current`` (same-day revisions of two streams are not
    newer than each other: compare revisions of one stream)."""
    return parse_revision(candidate, default_stream).date > parse_revision(current, default_stream).date
