# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""What the Linux conversion producer accepts as a source, and the CDI source it becomes.

Pure: no I/O. A golden is rebuilt on every cluster from the same inputs, so an input must name
exactly one artifact for ever: a containerdisk pinned by digest (a tag can move), or a bucket
object with its sha256 checksum (CDI verifies the bytes it downloads). Anything else is refused
with the reference, the rule and the supported move.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import redact
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import golden

_REGISTRY = re.compile(r"^docker://(?P<repo>[^@\s]+?)(?::(?P<tag>[^:/@\s]+))?(?:@(?P<digest>\S+))?$")
_SHA256 = re.compile(r"^sha256:[0-9a-f]{64}$")
_HTTP = re.compile(r"^https?://\S+$")
_KINDS = ("registry", "http", "s3")

_HTTP_KEYS = {
    "url": "url",
    "checksum": "checksum",
    "secret_ref": "secretRef",
    "cert_config_map": "certConfigMap",
}
_REGISTRY_KEYS = {"url": "url", "secret_ref": "secretRef", "cert_config_map": "certConfigMap"}
# CDI's s3 source: url, secretRef, certConfigMap. It has no checksum field: the checksum given here names
# the golden (the export's sha256) and stays out of the DataVolume.
_S3_KEYS = {"url": "url", "secret_ref": "secretRef", "cert_config_map": "certConfigMap"}
S3_SECRET_MOVE = (
    "give source.s3.secret_ref, a Secret in the DataVolume's namespace with accessKeyId and secretKey: CDI "
    "signs its requests to the bucket with them, so no bearer URL sits in the DataVolume's spec"
)
_PULL_METHODS = ("pod", "node")
# The supported moves for a source URL with credentials in it (the URL lands in the DataVolume's spec).
HTTP_CREDENTIALS_MOVE = (
    "for a private S3 or RGW bucket give source.s3 with a secret_ref (a Secret with accessKeyId and "
    "secretKey; CDI signs its requests) or set source.http.presign: true; for a web server behind basic "
    "auth put the user and password in a Secret (keys accessKeyId and secretKey) and give "
    "source.http.secret_ref"
)
REGISTRY_CREDENTIALS_MOVE = (
    "put the registry's user and password in a Secret (keys accessKeyId and secretKey) and give "
    "source.registry.secret_ref"
)


class SourceError(golden.GoldenError):
    """A source that would not name one immutable artifact; the message names the supported move."""


def _kind(source):
    if not isinstance(source, dict):
        raise SourceError(
            "source %r is not a mapping: give {registry: docker://<repo>@sha256:<digest>} or "
            "{http: {url: ..., checksum: sha256:<hex>}}" % (source,)
        )
    kinds = [k for k in _KINDS if source.get(k)]
    others = sorted(k for k in source if k not in _KINDS)
    if others:
        raise SourceError(
            "source keys %s are not supported: the Linux producer imports from registry (a digest-pinned "
            "containerdisk), http (a bucket object with a sha256 checksum) or s3 (an object of a private "
            "bucket, read with a secretRef)" % ", ".join(others)
        )
    if len(kinds) != 1:
        raise SourceError(
            "source must have exactly one of registry, http or s3, got %s" % (", ".join(kinds) or "none")
        )
    return kinds[0]


def _settings(value, keys, kind):
    """A registry or http source as a dict of snake_case keys (a bare string is the url)."""
    if isinstance(value, str):
        value = {"url": value}
    if not isinstance(value, dict):
        raise SourceError("source.%s must be a URL or a mapping with url, got %r" % (kind, value))
    known = set(keys) | {"registry": {"pull_method"}, "http": {"presign"}, "s3": {"checksum"}}[kind]
    unknown = sorted(set(value) - known)
    if unknown:
        raise SourceError(
            "source.%s keys %s are not supported (known: %s)"
            % (kind, ", ".join(unknown), ", ".join(sorted(known)))
        )
    return value


def registry_digest(url):
    """``sha256:<hex>`` of a ``docker://<repo>[:tag]@sha256:<hex>`` reference; refuses anything else."""
    text = str(url or "").strip()
    match = _REGISTRY.match(text)
    if not match:
        raise SourceError(
            "registry source %r is not a containerdisk reference: use docker://<registry>/<repo>@sha256:<digest>"
            % (url,)
        )
    digest = match.group("digest")
    if not digest:
        raise SourceError(
            "registry source %s has no digest: a tag can be moved to other bytes, so clusters would not "
            "build the same golden; pin it as docker://%s@sha256:<digest>" % (text, match.group("repo"))
        )
    if not _SHA256.match(digest):
        raise SourceError(
            "registry source %s: digest %s is not sha256:<64 lowercase hex digits>; pin it as "
            "docker://%s@sha256:<digest>" % (text, digest, match.group("repo"))
        )
    return digest


def http_checksum(url, checksum):
    """The ``sha256:<hex>`` checksum an http source must carry, normalized."""
    url = redact.redact_url(url)
    if not checksum:
        raise SourceError(
            "http source %s has no checksum: without one the bytes CDI downloads are not verified and "
            "clusters may build different goldens; add checksum: sha256:<hex of the object>" % (url,)
        )
    text = str(checksum).strip()
    algo = text.split(":", 1)[0].lower() if ":" in text else ""
    if algo and algo != "sha256":
        raise SourceError(
            "http source %s: checksum %s uses %s; the golden is named by its sha256, so give "
            "checksum: sha256:<hex>" % (url, text, algo)
        )
    try:
        return golden.normalize_digest(text if algo else "sha256:" + text)
    except golden.GoldenError:
        raise SourceError("http source %s: checksum %s is not sha256:<64 hex digits>" % (url, text)) from None


def pinned_source(source):
    """The CDI DataVolume ``spec.source`` for a validated source (camelCase keys, as CDI spells them)."""
    kind = _kind(source)
    if kind == "registry":
        value = _settings(source["registry"], _REGISTRY_KEYS, kind)
        redact.refuse_credentials(
            str(value.get("url") or "").strip(), "source.registry.url", REGISTRY_CREDENTIALS_MOVE
        )
        registry_digest(value.get("url"))
        out = {cdi: value[key] for key, cdi in _REGISTRY_KEYS.items() if value.get(key)}
        method = value.get("pull_method")
        if method:
            if method not in _PULL_METHODS:
                raise SourceError(
                    "source.registry.pull_method %r is not %s" % (method, " or ".join(_PULL_METHODS))
                )
            out["pullMethod"] = method
        out["url"] = str(out["url"]).strip()
        return {"registry": out}
    if kind == "s3":
        return {"s3": _s3_source(_settings(source["s3"], _S3_KEYS, kind))}
    value = _settings(source["http"], _HTTP_KEYS, kind)
    url = redact.refuse_credentials(
        str(value.get("url") or "").strip(), "source.http.url", HTTP_CREDENTIALS_MOVE
    )
    shown = redact.redact_url(url)
    if not _HTTP.match(url):
        raise SourceError("http source %r is not an http(s) URL" % (shown,))
    presign = value.get("presign", False)
    if not isinstance(presign, bool):
        raise SourceError("source.http.presign of %s must be true or false, got %r" % (shown, presign))
    if presign and value.get("secret_ref"):
        raise SourceError(
            "source.http of %s sets both presign and secret_ref: CDI sends a secretRef as HTTP basic auth, "
            "which S3 and RGW refuse, while presign signs the URL itself; keep presign for an S3 bucket, or "
            "secret_ref for a server that takes basic auth" % shown
        )
    out = {cdi: value[key] for key, cdi in _HTTP_KEYS.items() if value.get(key)}
    out["url"] = url
    out["checksum"] = http_checksum(url, value.get("checksum"))
    return {"http": out}


def _s3_source(value):
    """CDI's ``source.s3`` of a private bucket's object: a path-style ``<endpoint>/<bucket>/<key>`` URL with
    no credentials or query in it, read with the keys of ``secret_ref`` (required: without it CDI reads
    anonymously, which is what an http source is for)."""
    url = redact.refuse_credentials(str(value.get("url") or "").strip(), "source.s3.url", S3_SECRET_MOVE)
    shown = redact.redact_url(url)
    parts = url.split("?", 1)
    if (
        not _HTTP.match(url)
        or len(parts) > 1
        or len(url.split("/", 3)) < 4
        or "/" not in url.split("/", 3)[3]
    ):
        raise SourceError(
            "s3 source %r is not a path-style http(s)://<endpoint>/<bucket>/<key> URL without a query"
            % (shown,)
        )
    if not value.get("secret_ref"):
        raise SourceError("s3 source %s has no secret_ref: %s" % (shown, S3_SECRET_MOVE))
    http_checksum(url, value.get("checksum"))
    out = {cdi: value[key] for key, cdi in _S3_KEYS.items() if value.get(key)}
    out["url"] = url
    return out


def source_digest(source):
    """The digest that names the artifact: the registry digest, or the bucket object's sha256."""
    block = pinned_source(source)
    if "registry" in block:
        return registry_digest(block["registry"]["url"])
    if "s3" in block:
        return http_checksum(block["s3"]["url"], source["s3"].get("checksum"))
    return block["http"]["checksum"]


# A Job name is also a label value, which Kubernetes holds to 63 characters.
_LABEL_MAX = 63


def _plan_entry(image, date, where):
    if not isinstance(image, dict) or not image.get("family"):
        raise SourceError("%s: expected a mapping with family, os_name, size and source" % where)
    try:
        source = pinned_source(image.get("source"))
        digest = image.get("digest") or source_digest(image.get("source"))
        name = golden.versioned_name(image["family"], date or None, digest)
    except golden.GoldenError as exc:
        raise SourceError("%s (family %s): %s" % (where, image["family"], exc.msg)) from None
    given = image.get("source") or {}
    http = given.get("http") or given.get("s3") or {}
    if isinstance(http, str):
        http = {}
    return {
        "family": image["family"],
        "os_name": image.get("os_name"),
        "size": image.get("size"),
        "source": source,
        "digest": digest,
        "golden": name,
        "secret_ref": http.get("secret_ref") or "",
        "presign": bool(http.get("presign", False)),
        "image_facts": image.get("image_facts"),
    }


def _refuse_repeats(plan, option):
    names = [entry["golden"] for entry in plan]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise SourceError(
            "%s makes the same golden more than once (%s): each (family, digest) appears once per run"
            % (option, ", ".join(repeated))
        )


def build_plan(images, date, namespace):
    """What the build entry point makes of each image: the golden's name, its import DataVolume, its
    converted volume and conversion Job, all in ``namespace`` (a snapshot sits beside its source PVC).
    Refuses, before anything is written, a source that is not pinned, a family whose Job name Kubernetes
    cannot hold, and two images that make the same golden."""
    plan = []
    for index, image in enumerate(images or []):
        entry = _plan_entry(image, date, "linux_golden_images[%d]" % index)
        job = entry["golden"] + "-convert"
        if len(job) > _LABEL_MAX:
            raise SourceError(
                "family %s makes the Job name %s (%d characters), longer than the %d Kubernetes allows: "
                "use a family id of at most %d characters"
                % (entry["family"], job, len(job), _LABEL_MAX, _LABEL_MAX - (len(job) - len(entry["family"])))
            )
        entry.update(
            datavolume=entry["golden"] + "-import",
            pvc=entry["golden"] + "-disk",
            job=job,
            namespace=namespace,
        )
        plan.append(entry)
    _refuse_repeats(plan, "linux_golden_images")
    return plan


def distribution_plan(artifacts, date, namespaces):
    """What the distribute entry point imports: each artifact a bucket object (``source.http``), imported
    as ``<golden>-disk`` in the namespace of its volume mode (``namespaces``: mode -> namespace)."""
    plan = []
    for index, artifact in enumerate(artifacts or []):
        where = "linux_golden_artifacts[%d]" % index
        entry = _plan_entry(artifact, date, where)
        if "registry" in entry["source"]:
            raise SourceError(
                "artifact %s has a registry source: distribution imports a qcow2 from the bucket over "
                "http (a large containerdisk does not survive a registry's storage driver); give "
                "source: {http: {url: ..., checksum: sha256:<hex>}} (or source.s3 with a secret_ref for a "
                "private bucket), or build it here with the role's main entry point" % entry["family"]
            )
        mode = artifact.get("mode") or "Filesystem"
        if mode not in namespaces:
            raise SourceError(
                "%s (family %s): mode %r is not %s"
                % (where, entry["family"], mode, " or ".join(sorted(namespaces)))
            )
        entry.update(mode=mode, datavolume=entry["golden"] + "-disk", namespace=namespaces[mode])
        plan.append(entry)
    _refuse_repeats(plan, "linux_golden_artifacts")
    return plan


def secret_refs(plan):
    """The Secrets a plan's http and s3 sources name, once per namespace: ``[{namespace, name}]``."""
    refs = []
    for entry in plan or []:
        ref = {"namespace": entry["namespace"], "name": entry["secret_ref"]}
        if entry.get("secret_ref") and ref not in refs:
            refs.append(ref)
    return refs
