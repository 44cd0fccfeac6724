# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Baked image revision names and artifact file names.

Pure: no I/O. A revision is the build date, ``v<YYYYMMDD>``; builds of a stream other than the
naming default (22.04, the first stream) carry the stream without its dot as a suffix:
``v20260615`` is 22.04, ``v20261201-2404`` is 24.04. The suffix keeps two streams built on the same
day distinct in the catalog, where every revision ever built lives side by side.

More than one build a day (a same-day CVE rebuild after the regular build) gets a build number:
the first build of a day has none, the next ones end in ``-r<NN>``, two digits from 02 to 99:
``v20261201`` then ``v20261201-r02``; ``v20261201-2404`` then ``v20261201-2404-r02``. The number is
zero-padded so that the names also sort as text in build order within a stream.

The artifact of a revision is ``ubuntu-<stream without dot>-postgres-<revision>.qcow2``, e.g.
``ubuntu-2204-postgres-v20260615.qcow2`` and ``ubuntu-2404-postgres-v20261201-2404.qcow2``.

The naming default never follows the catalog's default OS stream: flipping the default stream must
not rename revisions that already exist.

What an image is comes from its own ``/etc/os-release``, never from the stream a build declares
(``image_os``): an Ubuntu image must be the declared stream, and an image of another distribution is
named by its ``ID`` and ``VERSION_ID``, ``debian-12-postgres-v20261207.qcow2`` (``image_artifact_name``),
its revision the build date alone. Only Ubuntu revisions belong to the catalog's streams.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import datetime
import re

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import InvalidValue, Refusal

DEFAULT_STREAM = "22.04"
ARTIFACT_PREFIX = "ubuntu-"
ARTIFACT_INFIX = "-postgres-"
ARTIFACT_EXTENSION = ".qcow2"

_STREAM = re.compile(r"^(\d{2})\.(\d{2})$")
UBUNTU = "ubuntu"
# os-release(5): ID is lower case letters, digits, ".", "_" and "-"; a VERSION_ID names a release.
_OS_ID = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_OS_VERSION_ID = re.compile(r"^[0-9][0-9a-z.~_-]*$")
FIRST_BUILD = 1
MAX_BUILD = 99
# A revision name, unanchored, for code that finds revisions inside longer names (disk claims).
REVISION_PATTERN = r"v\d{8}(?:-\d{4})?(?:-r\d{2})?"
_REVISION = re.compile(r"^v(\d{8})(?:-(\d{4}))?(?:-r(\d{2}))?$")
_ARTIFACT = re.compile(r"^ubuntu-(\d{4})-postgres-(%s)\.qcow2$" % REVISION_PATTERN)

Revision = collections.namedtuple("Revision", ["name", "date", "os_stream", "suffixed", "build"])
Revision.__new__.__defaults__ = (FIRST_BUILD,)
Revision.__doc__ = """A parsed revision: ``name`` as given, ``date`` (datetime.date), ``os_stream``
("24.04"), ``suffixed`` (True when the name carries the stream), ``build`` (1 for the first build of
the day, 2 for ``-r02``...)."""


def validate_stream(os_stream):
    """Return the OS stream as text (``"22.04"``); refuse anything not shaped ``NN.NN``."""
    text = str(os_stream).strip() if os_stream is not None else ""
    if not _STREAM.match(text):
        raise InvalidValue(
            "OS stream %r: expected an Ubuntu LTS version such as 22.04 or 24.04" % (os_stream,)
        )
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
        raise InvalidValue("build date %r: expected YYYYMMDD or YYYY-MM-DD" % (value,))
    try:
        return datetime.date(int(text[:4]), int(text[4:6]), int(text[6:]))
    except ValueError as exc:
        raise InvalidValue("build date %r is not a calendar date: %s" % (value, exc)) from exc


def validate_build(build):
    """The build number of the day as an int, 1 (the first build) to 99; refuses anything else."""
    if isinstance(build, bool) or not isinstance(build, int):
        text = str(build).strip() if build is not None else ""
        if not text.isdigit():
            raise InvalidValue("build %r: expected a whole number from 1 to %d" % (build, MAX_BUILD))
        build = int(text)
    if not FIRST_BUILD <= build <= MAX_BUILD:
        raise InvalidValue(
            "build %r: a day has builds 1 (no suffix) to %d (-r%d); use the next day's date"
            % (build, MAX_BUILD, MAX_BUILD)
        )
    return build


def revision_name(date, os_stream, default_stream=DEFAULT_STREAM, build=FIRST_BUILD):
    """``v<YYYYMMDD>`` for the default stream, ``v<YYYYMMDD>-<stream without dot>`` otherwise; a
    ``build`` after the first of the day adds ``-r<NN>``."""
    day = build_date(date)
    stream = validate_stream(os_stream)
    number = validate_build(build)
    name = "v" + day.strftime("%Y%m%d")
    if stream != validate_stream(default_stream):
        name += "-" + stream_suffix(stream)
    if number > FIRST_BUILD:
        name += "-r%02d" % number
    return name


def next_revision(date, os_stream, existing=(), default_stream=DEFAULT_STREAM):
    """The first revision name of ``date`` and ``os_stream`` not in ``existing`` (a same-day rebuild)."""
    taken = set(existing)
    for number in range(FIRST_BUILD, MAX_BUILD + 1):
        name = revision_name(date, os_stream, default_stream, number)
        if name not in taken:
            return name
    raise InvalidValue(
        "%s: all %d builds of the day exist; use the next day's date"
        % (revision_name(date, os_stream, default_stream), MAX_BUILD)
    )


def parse_revision(name, default_stream=DEFAULT_STREAM):
    """Parse a revision name into a ``Revision``; a name without suffix belongs to ``default_stream``."""
    text = str(name).strip() if name is not None else ""
    match = _REVISION.match(text)
    if not match:
        raise InvalidValue(
            "revision %r: expected v<YYYYMMDD> (default stream %s) or v<YYYYMMDD>-<stream without dot> "
            "such as v20261201-2404, with -r<NN> (02 to 99) for a later build of the same day"
            % (name, default_stream)
        )
    day = build_date(match.group(1))
    suffix = match.group(2)
    build = FIRST_BUILD
    if match.group(3) is not None:
        build = int(match.group(3))
        if build <= FIRST_BUILD:
            raise InvalidValue(
                "revision %r: the first build of a day has no -r suffix; later builds are -r02 to -r%d"
                % (name, MAX_BUILD)
            )
    if suffix is None:
        return Revision(text, day, validate_stream(default_stream), False, build)
    stream = _stream_from_suffix(suffix)
    if stream == validate_stream(default_stream):
        raise InvalidValue(
            "revision %r: the default stream %s is named without a suffix (v%s)"
            % (name, stream, match.group(1))
        )
    return Revision(text, day, stream, True, build)


def validate_revision(name, os_stream=None, default_stream=DEFAULT_STREAM):
    """Return the parsed ``Revision``; with ``os_stream`` also refuse a name of another stream."""
    rev = parse_revision(name, default_stream)
    if os_stream is not None:
        stream = validate_stream(os_stream)
        if rev.os_stream != stream:
            raise InvalidValue(
                "revision %s belongs to OS stream %s, not %s (the %s name would be %s)"
                % (
                    rev.name,
                    rev.os_stream,
                    stream,
                    stream,
                    revision_name(rev.date, stream, default_stream, rev.build),
                )
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


def image_name(revision, os_stream=None, default_stream=DEFAULT_STREAM):
    """The image a revision is registered as: its artifact's name without ``.qcow2``."""
    return artifact_name(revision, os_stream, default_stream)[: -len(ARTIFACT_EXTENSION)]


def artifact_file_name(date, os_stream, default_stream=DEFAULT_STREAM, build=FIRST_BUILD):
    """The artifact file name for a build date and stream (``revision_name`` then ``artifact_name``)."""
    return artifact_name(revision_name(date, os_stream, default_stream, build), None, default_stream)


def parse_artifact_name(file_name, default_stream=DEFAULT_STREAM):
    """Parse an artifact file name back into its ``Revision``; the stream in the prefix must agree."""
    text = str(file_name).strip() if file_name is not None else ""
    match = _ARTIFACT.match(text)
    if not match:
        raise InvalidValue(
            "artifact %r: expected ubuntu-<stream without dot>-postgres-<revision>.qcow2, "
            "e.g. ubuntu-2204-postgres-v20260615.qcow2" % (file_name,)
        )
    return validate_revision(match.group(2), _stream_from_suffix(match.group(1)), default_stream)


def revision_sort_key(name, default_stream=DEFAULT_STREAM):
    """Order revisions by build date, then build of the day, then OS stream (oldest first)."""
    rev = parse_revision(name, default_stream)
    return (rev.date, rev.build, tuple(int(p) for p in rev.os_stream.split(".")))


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
    """True when ``candidate`` was built after ``current``: a later day, or a later build of the same
    day (same-day first builds of two streams are not newer than each other: compare one stream)."""
    new, old = parse_revision(candidate, default_stream), parse_revision(current, default_stream)
    return (new.date, new.build) > (old.date, old.build)


def image_os(os_release, declared_stream, source="the image", default_stream=DEFAULT_STREAM):
    """What an image is, read from its os-release (``{"id", "version_id"}``, as ``image_facts`` reads it):
    ``{"id", "version_id", "revision_stream", "ubuntu"}``. ``revision_stream`` is the stream its revision is
    named in: the declared one for Ubuntu, which must be the image's ``VERSION_ID``; the naming default for
    another distribution, whose revision is the build date alone and whose name carries its own release.
    """
    release = os_release or {}
    os_id = str(release.get("id") or "").strip()
    version_id = str(release.get("version_id") or "").strip()
    if not (_OS_ID.match(os_id) and _OS_VERSION_ID.match(version_id)):
        raise Refusal(
            "%s" % source,
            "its os-release gives no usable ID and VERSION_ID (ID=%r, VERSION_ID=%r), so what it is "
            "cannot be named" % (os_id or None, version_id or None),
            "build from an image that carries /etc/os-release (or /usr/lib/os-release)",
        )
    stream = validate_stream(declared_stream)
    if os_id == UBUNTU:
        if version_id != stream:
            raise Refusal(
                "%s" % source,
                "its os-release says Ubuntu %s, the build declares the %s stream" % (version_id, stream),
                'declare the stream the image is (packer_build_os_version: "%s") or build from an Ubuntu %s '
                "image" % (version_id, stream),
            )
        return {"id": os_id, "version_id": version_id, "revision_stream": stream, "ubuntu": True}
    return {
        "id": os_id,
        "version_id": version_id,
        "revision_stream": validate_stream(default_stream),
        "ubuntu": False,
    }


def image_artifact_name(revision, os, default_stream=DEFAULT_STREAM):
    """The artifact file name of ``revision`` for an image that is ``os`` (an ``image_os`` answer):
    ``ubuntu-<stream>-postgres-<revision>.qcow2`` for Ubuntu (the revision must be of its stream),
    ``<id>-<VERSION_ID without dots>-postgres-<revision>.qcow2`` for another distribution."""
    found = os or {}
    if found.get("id") == UBUNTU:
        return artifact_name(revision, found.get("version_id"), default_stream)
    checked = image_os(found, default_stream, default_stream=default_stream)
    rev = validate_revision(revision, checked["revision_stream"], default_stream)
    return "%s-%s%s%s%s" % (
        checked["id"],
        checked["version_id"].replace(".", ""),
        ARTIFACT_INFIX,
        rev.name,
        ARTIFACT_EXTENSION,
    )
