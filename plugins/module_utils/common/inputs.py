# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Input rules every module shares, checked before anything is written.

Pure: no I/O. Each rule raises ``Refusal`` naming the option, the rule and the supported move:
durations (timeouts, intervals, pauses) must be positive; a version is a string, never a YAML float
(``1.10`` reaches a module as ``1.1``); an object key is one S3 accepts and that cannot climb out of
its prefix. A kubeconfig, or any file a module reads, that is named but not there is refused naming its
path.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal

# S3's limit on an object key, in UTF-8 bytes.
MAX_KEY_BYTES = 1024

# The wait options every waiting module takes (documented by the k8s_wait doc fragment): whether to wait,
# how many seconds in all, and the longest pause between two reads (a fraction of a second allowed).
WAIT_ARG_SPEC = {
    "wait": {"type": "bool", "default": True},
    "wait_timeout": {"type": "int", "default": 300},
    "wait_sleep": {"type": "float", "default": 2},
}


def wait_arg_spec(timeout=300, sleep=2, wait=True, timeout_aliases=(), sleep_aliases=()):
    """``WAIT_ARG_SPEC`` with a module's own defaults: the one spelling and the one type of every wait.

    ``wait`` is the default of the ``wait`` option, or None for a module that always waits (no ``wait``
    option). ``timeout_aliases`` and ``sleep_aliases`` keep the old names a role may still pass.
    """
    spec = {
        "wait_timeout": dict(WAIT_ARG_SPEC["wait_timeout"], default=timeout),
        "wait_sleep": dict(WAIT_ARG_SPEC["wait_sleep"], default=sleep),
    }
    if wait is not None:
        spec["wait"] = dict(WAIT_ARG_SPEC["wait"], default=wait)
    for option, aliases in (("wait_timeout", timeout_aliases), ("wait_sleep", sleep_aliases)):
        if aliases:
            spec[option]["aliases"] = list(aliases)
    return spec


def positive(value, option, allow_none=False):
    """A timeout, interval or pause: a number greater than zero. Returns it."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Refusal(
            "option %s" % option, "%r is not a number of seconds" % (value,), "give a positive number"
        )
    if value <= 0:
        shown = int(value) if float(value).is_integer() else value  # wait_sleep: 0 arrives as 0.0
        raise Refusal(
            "option %s" % option,
            "%s is not a duration: it must be greater than zero, checked before anything is written" % shown,
            "give a positive number of seconds",
        )
    return value


def positive_all(params, options):
    """``positive`` for each named option present in ``params`` (None means not given)."""
    for option in options:
        if params.get(option) is not None:
            positive(params[option], option)


def base_url(value):
    """A base URL (or directory) as paths are joined onto it: surrounding blanks and trailing ``/`` dropped.

    ``http://s3.example/`` and ``http://s3.example`` name the same place; joined with ``/bucket`` the first
    would give ``http://s3.example//bucket``, which S3 reads as another key. None or empty gives ``""``.
    """
    return str(value or "").strip().rstrip("/")


def version_string(value, option, required=False):
    """A version given as a string. A YAML float (``1.10`` read as ``1.1``) is refused: quote it."""
    if value is None:
        if required:
            raise Refusal("option %s" % option, "a version is required", "give it as a quoted string")
        return None
    if isinstance(value, bool):
        raise Refusal("option %s" % option, "%r is a boolean, not a version" % value, "quote the version")
    if isinstance(value, float):
        raise Refusal(
            "option %s" % option,
            "%r arrived as a YAML number, and a number loses digits (1.10 becomes 1.1)" % value,
            'quote it: %s: "%s"' % (option, value),
        )
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, str) or not value.strip():
        raise Refusal("option %s" % option, "%r is not a version string" % (value,), "quote the version")
    return value


def object_key(key, option="key"):
    """An S3 object key this collection may write: 1-1024 UTF-8 bytes, a clean relative path.

    Refused: an empty key, a leading ``/``, empty, ``.`` or ``..`` segments (a key that reads like a
    path escaping its prefix is one a later reader will resolve wrongly), control characters and
    backslashes, and keys over S3's 1,024 bytes.
    """
    subject = "option %s (%r)" % (
        option,
        key if not isinstance(key, str) or len(key) <= 80 else key[:80] + "...",
    )
    if not isinstance(key, str) or not key:
        raise Refusal(
            subject,
            "an object key must be a non-empty string",
            "give the key as a path such as family/version/file.qcow2",
        )
    size = len(key.encode("utf-8"))
    if size > MAX_KEY_BYTES:
        raise Refusal(
            subject,
            "the key is %d bytes and S3 allows at most %d" % (size, MAX_KEY_BYTES),
            "use a shorter key",
        )
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in key) or "\\" in key:
        raise Refusal(subject, "the key holds control characters or a backslash", "use plain path segments")
    if key.startswith("/"):
        raise Refusal(subject, "the key starts with '/'", "drop the leading slash")
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise Refusal(
                subject,
                "the key has an empty, '.' or '..' segment, so it does not name one place under its prefix",
                "use plain path segments",
            )
    return key


def require_file(path, is_file, subject, move):
    """A file a module reads on the controller: it must exist and be a regular file. Returns ``path``.

    ``is_file`` is what the caller saw (``os.path.isfile(path)``); ``subject`` names the option or the
    object the file stands for, ``move`` says what to give instead.
    """
    if is_file:
        return path
    raise Refusal(subject, "it does not exist or is not a file", move)


def kubeconfig_file(path, exists):
    """A kubeconfig named by path (the kubeconfig option or K8S_AUTH_KUBECONFIG) must exist.

    ``exists`` says whether the file is there (the caller looked). Returns the path.
    """
    if exists:
        return path
    raise Refusal(
        "kubeconfig %s (option kubeconfig or K8S_AUTH_KUBECONFIG)" % path,
        "the file does not exist",
        "point it at a kubeconfig file, or leave it unset to use ~/.kube/config or the in-cluster "
        "service account",
    )


def unknown_variables(names, prefixes, known, where):
    """Refuse variables in a role's or playbook's namespace that it does not take.

    ``names`` are the variables set for the run (extra vars, inventory, play vars, ...), ``prefixes`` the
    namespaces (``repave_``, ``publish_``, ...), ``known`` the variables the role's argument spec or the
    playbook documents. A misspelt option would otherwise silently mean its default (``repave_windw`` and
    no window at all), so one unknown name in the namespace is refused, with the closest known name.
    Returns the sorted names checked when all are known; ``where`` names the role or playbook.
    """
    import difflib

    prefixes = tuple(prefixes)
    known = set(known)
    found = sorted(n for n in set(names) if isinstance(n, str) and n.startswith(prefixes))
    unknown = [n for n in found if n not in known]
    if not unknown:
        return found
    words = []
    for name in unknown:
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
        words.append("%s (did you mean %s?)" % (name, close[0]) if close else name)
    raise Refusal(
        where,
        "unknown variable(s) %s: %s does not take them, and a misspelt option would silently mean its "
        "default" % (", ".join(words), where),
        "use the variables it documents (%s), or remove these; nothing was run"
        % ", ".join(sorted(n for n in known if n.startswith(prefixes))),
        unknown=unknown,
    )
