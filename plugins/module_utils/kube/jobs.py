# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""A Job that works on PersistentVolumeClaims: how it is laid out, how it ended, what it says.

Pure: no I/O. A claim is presented by its ``volumeMode``: a Block claim as a device at ``path``, a
Filesystem claim as a directory mounted at ``path`` (its image is the file ``file`` in it). The one
qemu-img conversion of the collection (a golden's raw source onto its Block volume, a sealed disk into a
compressed qcow2) is ``convert_command``; its ``-p`` progress in the pod log becomes the wait's percent.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import mirror
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import redact
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import consumers
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds

COMPLETE = "Complete"
FAILED = "Failed"
FORMATS = ("raw", "qcow2")
MANAGED_BY = ("app.kubernetes.io/managed-by", "goldenimage.pipeline")
LOG_TAIL_CHARS = 4000
# What an export Job made carries this label (value: the Job's name): only such objects are ever deleted.
EXPORT_MARK = "goldenimage.pipeline/export-job"
EXPORT_SCRATCH = "/scratch"
EXPORT_CODE = "/exporter"
# A Job's program is shipped as a ConfigMap mounted on PYTHONPATH: each file under a key that names
# its place below module_utils ("disk._seal_cli.py": a key may not hold "/"), laid out again by the
# volume's items.
CODE_PACKAGE = "ansible_collections/goldenimage/pipeline/plugins/module_utils"
EXPORT_PROGRAM = "ansible_collections.goldenimage.pipeline.plugins.module_utils.windows._export_cli"
# An export's name is its Job's, ConfigMap's and (with "-scratch") claim's; a Job's pods add a suffix.
EXPORT_MAX_NAME = 56
# qemu-img convert -p rewrites "    (45.20/100%)" on one line.
_PROGRESS = re.compile(r"\((\d+(?:\.\d+)?)/100%\)")
# Where the export Job reads its sealed claim (a Filesystem claim's directory; a Block claim's device).
EXPORT_SOURCE_PATH = "/source"
EXPORT_SOURCE_DEVICE = "/dev/source"
# The export program announces each phase on a line of its own: "phase convert: ...".
_PHASE = "phase "


def claim_mode(claim):
    return kinds.spec(claim).get("volumeMode") or "Filesystem"


def present(volume, claim):
    """Where the container sees ``volume``'s image: ``(image_path, mount, device)`` by the claim's mode."""
    name, path = volume["name"], volume["path"].rstrip("/")
    if claim_mode(claim) == "Block":
        return path, None, {"name": name, "devicePath": path}
    if not volume.get("file"):
        raise Refusal(
            "PersistentVolumeClaim %s/%s" % (kinds.namespace(claim), kinds.name(claim)),
            "it is a Filesystem volume and the Job was not told which file in it holds the image",
            "give the volume's file",
        )
    mount = {"name": name, "mountPath": path}
    if volume.get("read_only"):
        mount["readOnly"] = True
    return "%s/%s" % (path, volume["file"]), mount, None


def convert_command(source, dest, dest_format, compress=False, dest_is_device=False):
    """The qemu-img argv: raw in, ``dest_format`` out; onto a device it writes in place (``-n``)."""
    if dest_format not in FORMATS:
        raise Refusal("option format", "%r is not one of %s" % (dest_format, ", ".join(FORMATS)), "pick one")
    if compress and dest_format != "qcow2":
        raise Refusal("option compress", "only a qcow2 output can be compressed", "use format qcow2")
    argv = ["qemu-img", "convert", "-p", "-f", "raw", "-O", dest_format]
    if compress:
        argv.append("-c")
    if dest_is_device:
        argv.append("-n")
    return argv + [source, dest]


def security_context(privileged):
    if privileged:
        return {"privileged": True}
    return {"allowPrivilegeEscalation": False, "runAsUser": 0, "capabilities": {"drop": ["ALL"]}}


def job_definition(
    name, namespace, labels, image, command, volumes, deadline, backoff_limit, privileged=False
):
    """``volumes``: ``[(volume, claim, mount, device)]``, as ``present`` laid them out."""
    # The collection's mark: what it made, it may clean up (kube_object deletes nothing else).
    job_labels = dict(labels)
    job_labels[MANAGED_BY[0]] = MANAGED_BY[1]
    container = {
        "name": "run",
        "image": image,
        "command": list(command),
        "securityContext": security_context(privileged),
    }
    mounts = [m for _v, _c, m, _d in volumes if m]
    devices = [d for _v, _c, _m, d in volumes if d]
    if mounts:
        container["volumeMounts"] = mounts
    if devices:
        container["volumeDevices"] = devices
    pod_volumes = []
    for volume, claim, _m, _d in volumes:
        source = {"claimName": kinds.name(claim)}
        if volume.get("read_only"):
            source["readOnly"] = True
        pod_volumes.append({"name": volume["name"], "persistentVolumeClaim": source})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": job_labels},
        "spec": {
            "backoffLimit": int(backoff_limit),
            "activeDeadlineSeconds": max(1, int(deadline)),
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {"restartPolicy": "Never", "containers": [container], "volumes": pod_volumes},
            },
        },
    }


def export_job_definition(name, namespace, labels, image, sealed, scratch, files, args, secret, deadline):
    """The export Job: the sealed claim read-only (``sealed``: ``(volume, claim, mount, device)`` as
    ``present`` laid it out), the scratch claim at ``/scratch``, the program's files from the ConfigMap
    of the same name at ``/exporter``, and the S3 credentials from the keys of ``secret``
    (``{"name", "access_key", "secret_key", "session_token"}``) in the environment."""
    scratch_volume = {"name": "scratch", "path": EXPORT_SCRATCH, "file": None}
    scratch_mount = {"name": "scratch", "mountPath": EXPORT_SCRATCH}
    command = ["python3", "-m", EXPORT_PROGRAM] + list(args)
    definition = job_definition(
        name,
        namespace,
        labels,
        image,
        command,
        [sealed, (scratch_volume, scratch, scratch_mount, None)],
        deadline,
        0,
    )
    pod = definition["spec"]["template"]["spec"]
    container = pod["containers"][0]
    container["volumeMounts"] = container.get("volumeMounts", []) + [
        {"name": "exporter", "mountPath": EXPORT_CODE, "readOnly": True}
    ]
    env = [{"name": "PYTHONPATH", "value": EXPORT_CODE}, {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}]
    for variable, field in (
        ("EXPORT_ACCESS_KEY_ID", "access_key"),
        ("EXPORT_SECRET_ACCESS_KEY", "secret_key"),
        ("EXPORT_SESSION_TOKEN", "session_token"),
    ):
        if secret.get(field):
            ref = {"name": secret["name"], "key": secret[field]}
            if field == "session_token":
                ref["optional"] = True
            env.append({"name": variable, "valueFrom": {"secretKeyRef": ref}})
    container["env"] = env
    pod["volumes"].append({"name": "exporter", "configMap": {"name": name, "items": code_items(files)}})
    return definition


def code_key(module_name):
    """The ConfigMap key of a module_utils file, from its dotted module name."""
    return module_name.split(".module_utils.", 1)[1] + ".py"


def code_items(files):
    """The volume items that put each ConfigMap key back at its path below module_utils."""
    return [
        {"key": key, "path": "%s/%s.py" % (CODE_PACKAGE, key[:-3].replace(".", "/"))} for key in sorted(files)
    ]


def export_scratch_name(name):
    return name + "-scratch"


def export_staging_key(p):
    """Where the export Job uploads the parts before the final object is copied from them."""
    return "%s.partial-%s-%s" % (p["key"], p["namespace"], p["name"])


def export_source_name(p):
    """The source an export records: its ``source`` option, else the claim's ``pvc://`` URL."""
    return p["source"] or "pvc://%s/%s" % (p["namespace"], p["pvc"])


def export_definitions(p, claim, secret, part_size, sensitive, files, exported_at):
    """The objects an export makes, in the order they are created: its scratch claim, the ConfigMap of
    the program's ``files`` and the Job. ``p``: the module's options; ``claim``: the sealed claim as read;
    ``secret``: as ``export_secret`` checked it; ``sensitive``: the reasons the bytes must not be public;
    ``exported_at``: the time recorded on the object (aware)."""
    labels = dict(p["labels"], **{"app.kubernetes.io/name": "golden-export", EXPORT_MARK: p["name"]})
    volume = {"name": "source", "path": EXPORT_SOURCE_PATH, "file": p["file"], "read_only": True}
    if claim_mode(claim) == "Block":
        volume["path"] = EXPORT_SOURCE_DEVICE
    source_path, mount, device = present(volume, claim)
    scratch_name = export_scratch_name(p["name"])
    scratch_spec = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": p["scratch_size"]}},
    }
    if p["scratch_storage_class"]:
        scratch_spec["storageClassName"] = p["scratch_storage_class"]
    scratch = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": scratch_name, "namespace": p["namespace"], "labels": dict(labels)},
        "spec": scratch_spec,
    }
    args = [
        "--source",
        source_path,
        "--scratch",
        EXPORT_SCRATCH,
        "--filename",
        p["key"].rsplit("/", 1)[-1],
        "--endpoint",
        p["pod_endpoint_url"] or p["endpoint_url"],
        "--region",
        p["region"] or "us-east-1",
        "--bucket",
        p["bucket"],
        "--key",
        p["key"],
        "--staging-key",
        export_staging_key(p),
        "--part-size",
        str(mirror.plan_part_size(None, part_size)),
        "--concurrency",
        str(p["concurrency"]),
        "--content-type",
        p["content_type"],
        "--source-url",
        redact.redact_url(export_source_name(p)),
        "--source-uid",
        claim["metadata"]["uid"],
        "--exported-at",
        mirror.timestamp(exported_at),
    ]
    if not p["compress"]:
        args.append("--no-compress")
    if p["os"]:
        args += ["--os-family", p["os"]]
    for reason in sensitive:
        args += ["--sensitive-reason", reason]
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": p["name"], "namespace": p["namespace"], "labels": dict(labels)},
        "data": files,
    }
    job = export_job_definition(
        p["name"],
        p["namespace"],
        labels,
        p["image"],
        (volume, claim, mount, device),
        {"metadata": {"name": scratch_name}},
        files,
        args,
        secret,
        p["wait_timeout"],
    )
    return [scratch, configmap, job]


def require_claim(claim, namespace, name, move, role=None, rule="it does not exist"):
    """A claim the Job reads or writes: ``claim`` is what was read (None: absent), which is refused
    naming it (and its ``role`` in the Job), before anything is written. Returns the claim."""
    if claim is not None:
        return claim
    subject = "PersistentVolumeClaim %s/%s" % (namespace, name)
    raise Refusal("%s (%s)" % (subject, role) if role else subject, rule, move)


def check_export_request(name, scratch_size, scratch_bytes):
    """An export's own options: a name that leaves room for the names made from it, and a scratch claim
    (``scratch_bytes``: its size read as a quantity) that can hold the qcow2."""
    if len(name) > EXPORT_MAX_NAME:
        raise Refusal(
            "option name (%s)" % name, "it is longer than %d characters" % EXPORT_MAX_NAME, "shorten it"
        )
    if scratch_bytes <= 0:
        raise Refusal(
            "option scratch_size (%s)" % scratch_size,
            "an empty scratch claim holds no qcow2",
            "give a size such as 80Gi",
        )


def export_secret(namespace, name, secret, access_key, secret_key, session_token):
    """The Secret an export Job takes the bucket's credentials from: ``secret`` is what was read. It
    must exist and hold the two named keys; the token's key is used only when present. Returns the
    reference ``export_job_definition`` takes."""
    where = "Secret %s/%s" % (namespace, name)
    if secret is None:
        raise Refusal(
            where, "it does not exist", "create it with the bucket's credentials; nothing was exported"
        )
    data = dict(secret.get("data") or {}, **(secret.get("stringData") or {}))
    missing = [k for k in (access_key, secret_key) if k not in data]
    if missing:
        raise Refusal(
            where,
            "it has no key %s" % " and no key ".join(missing),
            "add the keys, or name the ones it has with access_key_field and secret_key_field",
        )
    return {
        "name": name,
        "access_key": access_key,
        "secret_key": secret_key,
        "session_token": session_token if session_token in data else None,
    }


def is_export_object(obj, name):
    """Whether ``obj`` was made by the export Job ``name`` (its mark), so the export may delete it."""
    return kinds.labels(obj).get(EXPORT_MARK) == name


def is_export_pod(pod, name):
    """A pod of export ``name``'s Job (it mounts the scratch claim and the ConfigMap by design)."""
    return is_export_object(pod, name) and kinds.labels(pod).get("job-name") == name


def export_pod_selector(name):
    return "job-name=%s,%s=%s" % (name, EXPORT_MARK, name)


def export_leftover(found, name, users, unread=None):
    """What the end of export ``name`` does with an object it may have made, read as ``found``: ``gone``,
    ``alone`` (not this export's: never deleted), ``in use`` (with why) or ``delete``. ``users``: who uses
    it (``[]`` nobody, None when that could not be read, ``unread`` saying why)."""
    if found is None:
        return "gone", None
    if not is_export_object(found, name):
        return "alone", None
    if users is None or users:
        why = "; ".join(consumers.describe(c) for c in users or []) or (
            "who uses it could not be read (%s)" % unread
        )
        return "in use", "in use: %s" % why
    return "delete", None


def export_leftover_note(namespace, left):
    """What could not be deleted, and the command that deletes what nothing uses."""
    names = ", ".join(
        "%s %s/%s (%s)" % (item["kind"], namespace, item["name"], item["error"]) for item in left
    )
    # What is in use is left for its users to release; the rest can simply be deleted.
    free = " ".join("%s/%s" % (i["kind"].lower(), i["name"]) for i in left if not i.get("in_use"))
    return "could not delete %s" % names + (
        "; remove them with: kubectl -n %s delete %s" % (namespace, free) if free else ""
    )


def refuse_foreign_objects(found, name, namespace):
    """Refuse an export whose Job, ConfigMap or scratch claim name is taken by an object it did not make:
    it would adopt it, and delete it at its end. ``found``: the objects read under those names."""
    foreign = [
        "%s %s/%s" % (o.get("kind"), namespace, kinds.name(o))
        for o in found
        if o and not is_export_object(o, name)
    ]
    if foreign:
        raise Refusal(
            ", ".join(foreign),
            "it exists and was not made by export Job %s (no %s=%s label); the export would write over it "
            "and delete it when done" % (name, EXPORT_MARK, name),
            "give the export another name; nothing was written",
        )


def outcome(job):
    """``(Complete|Failed|"", condition)`` from the Job's True Complete/Failed condition."""
    for cond in kinds.status(job).get("conditions") or []:
        if cond.get("type") in (COMPLETE, FAILED) and cond.get("status") == "True":
            return cond["type"], cond
    return "", None


def counts(job):
    status = kinds.status(job)
    return "active=%s succeeded=%s failed=%s" % (
        status.get("active", 0),
        status.get("succeeded", 0),
        status.get("failed", 0),
    )


def log_progress(log):
    """The last percent qemu-img -p printed, as ``45.20%``, or None."""
    found = _PROGRESS.findall(log or "")
    return "%.2f%%" % float(found[-1]) if found else None


def log_phase(log):
    """The phase the export program announced last (convert, sha256, upload, copy), or None."""
    for text in reversed((log or "").splitlines()):
        if text.startswith(_PHASE):
            return text[len(_PHASE) :].split(":", 1)[0]
    return None


def log_tail(log):
    """The end of a pod log, its progress rewrites dropped (each is a carriage-return overwrite)."""
    text = _PROGRESS.sub("", (log or "").replace("\r", "\n"))
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(lines)[-LOG_TAIL_CHARS:] or "(no log)"


def state_key(job, percent):
    if job is None:
        return "absent"
    return "%s/%s/%s" % (outcome(job)[0], counts(job), percent or "")


def line(namespace, name, job, percent, elapsed):
    if job is None:
        what = "not found"
    else:
        done = outcome(job)[0]
        what = (done or "running") + ", " + counts(job)
        if percent:
            what += ", progress " + percent
    return "Job %s/%s: %s after %.1fs" % (namespace, name, what, elapsed)


def failed_message(namespace, name, job, log, hint=""):
    _kind, cond = outcome(job)
    cond = cond or {}
    msg = "Job %s/%s failed: %s: %s." % (namespace, name, cond.get("reason") or "", cond.get("message") or "")
    if hint:
        msg += " " + hint
    return "%s Log of the last pod: %s" % (msg, log_tail(log))


def absent_message(namespace, name):
    return (
        "Job %s/%s does not exist although it was created: it was deleted while it ran (a lost create would "
        "have been created again); run again to start it anew" % (namespace, name)
    )


def timeout_message(namespace, name, job, percent, timeout, words, log, hint=""):
    msg = "timed out after %ss waiting for Job %s/%s to complete (%s): last seen %s%s." % (
        timeout,
        namespace,
        name,
        words,
        counts(job) if job else "not found",
        (", progress " + percent) if percent else "",
    )
    if hint:
        msg += " " + hint
    return "%s Log of the last pod: %s" % (msg, log_tail(log))
