"""Searching everything a run left for a secret, in every form it may take.

A secret is searched in its raw, URL-quoted, base64 and JSON/YAML-escaped forms (``redact.secret_forms``)
in the run's stdout and stderr, each task result (the test callback's record), and, with a cluster, every
object a run may write in the namespaces it touched, Events included. ``with_password`` puts a password
into a URL the way an operator would (user-info, quoted); the secret itself has ``/`` and ``+`` so its
quoted and escaped forms differ from the raw one.
"""

from __future__ import annotations

import json
import uuid
from urllib.parse import quote

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.redact import secret_forms

# (group, version, plural) of what a run of the collection may leave in a namespace.
NAMESPACED = (
    ("", "v1", "events"),
    ("", "v1", "configmaps"),
    ("", "v1", "secrets"),
    ("", "v1", "persistentvolumeclaims"),
    ("", "v1", "pods"),
    ("batch", "v1", "jobs"),
    ("cdi.kubevirt.io", "v1beta1", "datavolumes"),
    ("kubevirt.io", "v1", "virtualmachines"),
    ("snapshot.storage.k8s.io", "v1", "volumesnapshots"),
    ("harvesterhci.io", "v1beta1", "virtualmachineimages"),
)


def new_secret(prefix="pw"):
    return "%s-%s/x+y" % (prefix, uuid.uuid4().hex[:12])


def with_password(url, secret, user="mirror"):
    """``url`` with ``user:secret@`` in its user-info, the secret quoted as a URL carries it."""
    return url.replace("://", "://%s:%s@" % (user, quote(secret, safe="")), 1)


def run_traces(*runs):
    """``[(where, text)]``: each run's stdout, stderr and task results."""
    found = []
    for run in runs:
        found.append(("stdout", run.stdout))
        found.append(("stderr", run.stderr))
        found.extend(("result of %s" % entry["task"], json.dumps(entry["result"])) for entry in run.tasks)
    return found


def cluster_traces(api_client, namespaces):
    """``[(where, text)]``: every object of the kinds in NAMESPACED in each namespace (a kind the cluster
    does not serve is left out)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    raw = client.ApiClient.sanitize_for_serialization
    found = []
    for namespace in namespaces:
        for group, version, plural in NAMESPACED:
            path = "/api/%s" % version if not group else "/apis/%s/%s" % (group, version)
            try:
                body = api_client.call_api(
                    "%s/namespaces/%s/%s" % (path, namespace, plural),
                    "GET",
                    auth_settings=["BearerToken"],
                    response_type="object",
                    _return_http_data_only=True,
                )
            except ApiException as exc:
                if exc.status == 404:
                    continue
                raise
            found.append(("%s in %s" % (plural, namespace), json.dumps(raw(api_client, body))))
    return found


def leaks(found, secrets):
    """``(where, form, the text around it)`` for every form of every secret found."""
    return [
        (where, form, text[max(0, text.index(form) - 300) : text.index(form) + 60])
        for secret in secrets
        for form in secret_forms(secret)
        for where, text in found
        if form and form in text
    ]
