# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""S3 adapter: the boto3 client factories (signed and anonymous), the S3 retry policy, and the reads both the
modules and the export Job's program make.

boto3 is imported on first use. ``s3_client`` signs with the caller's credentials;
``anonymous_client`` signs nothing, so its requests are what anyone on the network can send (the
bucket exposure probes). An endpoint URL that carries user-info is refused before either is built:
the URL is printed and recorded, and S3 takes its keys from ``access_key``/``secret_key``. Failures
raise ``S3Error`` (a PipelineError), so a module fails with them in one place.

The retry policy of every S3 call is botocore's, configured here once (``retry_config``): "standard"
mode retries throttling, 5xx answers and dropped connections with exponential backoff and full
jitter, at most MAX_ATTEMPTS attempts in all. Nothing retries on top of it. The one addition lives in
the same loop: a bucket created a moment ago may answer NoSuchBucket for a while, so the operations in
NOT_YET_VISIBLE retry that code too, within the same attempts.

This file imports nothing from Ansible: the export Job's program (``_export_cli``) runs it in its pod,
next to a boto3 the image installs. The modules' argument spec is in ``_s3_module.py``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import random
import sys

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import redact
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError

# Attempts per S3 call, the first included; an anonymous probe makes PROBE_ATTEMPTS so it ends.
MAX_ATTEMPTS = 5
PROBE_ATTEMPTS = 2
# Botocore's cap on one backoff (standard mode), used for the codes below too.
MAX_BACKOFF = 20.0
# Operation -> codes that mean "not visible yet" right after a create (amazon.aws.s3_bucket, then a listing).
NOT_YET_VISIBLE = {"ListObjectsV2": ("NoSuchBucket",)}
# Registers the payload-hash hook of sign_with_sent_checksum once per client and operation.
PAYLOAD_HASH_HOOK = "goldenimage-payload-hash"
NOT_YET_VISIBLE_HOOK = "goldenimage-not-yet-visible"


# What to do instead of putting keys in the endpoint URL.
ENDPOINT_MOVE = (
    "give the endpoint without user-info and the keys in access_key/secret_key (or AWS_ACCESS_KEY_ID/"
    "AWS_SECRET_ACCESS_KEY), which are never logged"
)


class S3Error(PipelineError):
    """An S3 call failed: ``msg`` is "<action>: <cause>"; ``error_code`` is the S3 code when there is one."""

    def __init__(self, msg, **fields):
        super(S3Error, self).__init__(msg, **fields)


class MissingBoto3(S3Error):
    """boto3 is not importable; on the controller the message is Ansible's standard one."""


def retry_config(max_attempts=MAX_ATTEMPTS):
    """botocore's ``retries`` setting: the S3 retry policy."""
    return {"mode": "standard", "total_max_attempts": max_attempts}


def call_failed(action, exc, bucket=None, **fields):
    """The error to raise for ``exc`` met while doing ``action``: "<action>: <cause>", URLs redacted.

    A PipelineError passes through. With ``bucket``, a missing bucket says to create it first.
    """
    if isinstance(exc, PipelineError):
        return exc
    code = error_code(exc)
    if code:
        fields.setdefault("error_code", code)
    if bucket and code == "NoSuchBucket":
        return S3Error("%s: bucket %s does not exist; create it first" % (action, bucket), **fields)
    return S3Error("%s: %s" % (action, redact.redact_message(str(exc))), **fields)


def check_endpoint(endpoint_url, option="endpoint_url"):
    """Refuse an endpoint URL with user-info (a key in the URL is printed wherever the URL is)."""
    if endpoint_url:
        redact.refuse_credentials(endpoint_url, option, ENDPOINT_MOVE)
    return endpoint_url


def error_code(exc):
    """The S3 error code of a botocore ClientError (``NoSuchBucket``, ``SlowDown``, ``404``), else None."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    code = (response.get("Error") or {}).get("Code")
    return str(code) if code is not None else None


def s3_client(
    endpoint_url=None,
    access_key=None,
    secret_key=None,
    session_token=None,
    region=None,
    validate_certs=True,
    ca_bundle=None,
    profile=None,
    aws_config=None,
    max_attempts=MAX_ATTEMPTS,
    max_pool_connections=10,
    signature_version=None,
):
    """A boto3 S3 client with the S3 retry policy; path-style addressing for a custom endpoint.

    ``profile`` names a profile of the AWS config files instead of keys; ``aws_config`` is a dict of
    botocore Config parameters laid over these (amazon.aws's option of that name).
    ``max_pool_connections`` bounds the HTTP connections; raise it to at least the number of threads
    that share the client (concurrent multipart uploads), or they queue for a connection.
    """
    check_endpoint(endpoint_url)
    if profile and (access_key or secret_key or session_token):
        raise S3Error(
            "profile %s and access_key/secret_key/session_token were both given: a profile carries its own "
            "keys; give one or the other" % profile
        )
    boto3, Config = _boto3()
    options = {
        "retries": retry_config(max_attempts),
        "connect_timeout": 10,
        "read_timeout": 120,
        "max_pool_connections": max_pool_connections,
    }
    if signature_version:
        options["signature_version"] = signature_version
    if endpoint_url:
        # Virtual-host style needs DNS per bucket, which S3-compatible servers rarely have.
        options["s3"] = {"addressing_style": "path"}
        region = region or "us-east-1"
    try:
        config = Config(**options).merge(Config(**(aws_config or {})))
    except TypeError as exc:
        raise S3Error("aws_config: %s; give parameters of botocore.config.Config" % exc) from exc
    try:
        session = boto3.session.Session(
            aws_access_key_id=access_key or None,
            aws_secret_access_key=secret_key or None,
            aws_session_token=session_token or None,
            region_name=region or None,
            profile_name=profile or None,
        )
    except Exception as exc:  # botocore's ProfileNotFound
        raise call_failed("profile %s" % profile, exc) from exc
    verify = False if validate_certs is False else (ca_bundle or True)
    client = session.client("s3", endpoint_url=endpoint_url or None, verify=verify, config=config)
    return retry_not_yet_visible(client)


def retry_not_yet_visible(client, rng=random.random):
    """Let botocore's retry loop take the NOT_YET_VISIBLE codes as it takes a 503: the same attempts
    (the client's total_max_attempts) and the same exponential backoff with full jitter."""
    limit = (client.meta.config.retries or {}).get("total_max_attempts") or MAX_ATTEMPTS

    def needs_retry(response=None, attempts=1, operation=None, **_kwargs):
        codes = NOT_YET_VISIBLE.get(getattr(operation, "name", None), ())
        code = ((response or (None, {}))[1] or {}).get("Error", {}).get("Code")
        if code in codes and attempts < limit:
            return rng() * min(MAX_BACKOFF, 2 ** (attempts - 1))
        return None

    client.meta.events.register("needs-retry.s3", needs_retry, unique_id=NOT_YET_VISIBLE_HOOK)
    return client


def sign_with_sent_checksum(client, operations=("PutObject", "UploadPart")):
    """Let the ChecksumSHA256 a request of ``operations`` carries stand for its body in the signature.

    On plain HTTP botocore hashes every body again to sign it (``X-Amz-Content-SHA256``). A request
    that carries ``x-amz-checksum-sha256`` (the caller's sha256 of that same body) has that header
    signed with the others, and the server recomputes it over the body and refuses a mismatch, so the
    body is authenticated without a second hash: such a request is sent with ``UNSIGNED-PAYLOAD``.
    Requests without the header are signed as before.
    """
    from botocore.config import Config

    base = client.meta.config
    unsigned_body = base.merge(Config(s3=dict(base.s3 or {}, payload_signing_enabled=False)))

    def checksum_signs_body(request, **_kwargs):
        if request.headers.get("x-amz-checksum-sha256"):
            request.context["client_config"] = unsigned_body

    for operation in operations:
        client.meta.events.register(
            "before-sign.s3.%s" % operation,
            checksum_signs_body,
            unique_id="%s-%s" % (PAYLOAD_HASH_HOOK, operation),
        )
    return client


def _boto3():
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:
        raise MissingBoto3(_missing_boto3()) from exc
    return boto3, Config


def _missing_boto3():
    try:
        from ansible.module_utils.basic import missing_required_lib
    except ImportError:  # the export Job's program, in an image built without boto3
        return (
            "%s cannot import boto3, which talks to S3: build the image with boto3 installed" % sys.executable
        )
    return missing_required_lib("boto3", reason="to talk to S3")


def anonymous_client(endpoint_url=None, region=None, validate_certs=True, ca_bundle=None, timeout=20):
    """An S3 client that signs nothing: its requests are what anyone on the network can send.

    Two attempts at most, each bounded by ``timeout`` seconds, so a probe that gets no answer ends.
    """
    check_endpoint(endpoint_url)
    boto3, Config = _boto3()
    from botocore import UNSIGNED

    options = {
        "signature_version": UNSIGNED,
        "retries": retry_config(PROBE_ATTEMPTS),
        "connect_timeout": timeout,
        "read_timeout": timeout,
    }
    if endpoint_url:
        options["s3"] = {"addressing_style": "path"}
        region = region or "us-east-1"
    verify = False if validate_certs is False else (ca_bundle or True)
    session = boto3.session.Session(region_name=region or None)
    return session.client("s3", endpoint_url=endpoint_url or None, verify=verify, config=Config(**options))


def has_credentials(params):
    """Whether signed requests are possible: keys in the parameters, or boto3's credential chain."""
    if params.get("access_key") and params.get("secret_key"):
        return True
    try:
        boto3, _config = _boto3()
        return boto3.session.Session(profile_name=params.get("profile") or None).get_credentials() is not None
    except Exception:
        return False


def object_reads(anonymous, bucket, key):
    """An unsigned ranged GET and HEAD of one object with ``anonymous`` (``anonymous_client``):
    ``{probe: (status, code)}``, what ``exposure.verdict`` judges."""
    return {
        "get": answer_of(lambda: anonymous.get_object(Bucket=bucket, Key=key, Range="bytes=0-0"))[:2],
        "head": answer_of(lambda: anonymous.head_object(Bucket=bucket, Key=key))[:2],
    }


def answer_of(call):
    """``(status, code, response)`` of one boto3 call; status 0 and the error text when nothing answered."""
    try:
        response = call()
    except Exception as exc:
        metadata = (getattr(exc, "response", None) or {}).get("ResponseMetadata") or {}
        status = metadata.get("HTTPStatusCode")
        if status is None:
            return 0, "%s: %s" % (type(exc).__name__, redact.redact_message(str(exc))), None
        return int(status), error_code(exc) or str(status), None
    body = response.get("Body")
    if body is not None:
        body.close()
    return int(response["ResponseMetadata"]["HTTPStatusCode"]), None, response


def read_controls(signed, bucket):
    """The bucket's exposure controls as its owner reads them: name -> ``(status, code, value)`` for
    ``exposure.prove_private`` (policy_status: IsPublic; acl: ``[(grantee URI or id, permission, grantee
    type)]``; public_access_block: the configuration)."""
    status, code, found = answer_of(lambda: signed.get_bucket_policy_status(Bucket=bucket))
    controls = {"policy_status": (status, code, ((found or {}).get("PolicyStatus") or {}).get("IsPublic"))}
    status, code, found = answer_of(lambda: signed.get_bucket_acl(Bucket=bucket))
    grantees = [(g.get("Grantee") or {}, g.get("Permission")) for g in (found or {}).get("Grants") or []]
    grants = [
        (who.get("URI") or who.get("ID") or "", permission, who.get("Type")) for who, permission in grantees
    ]
    controls["acl"] = (status, code, grants)
    status, code, found = answer_of(lambda: signed.get_public_access_block(Bucket=bucket))
    controls["public_access_block"] = (status, code, (found or {}).get("PublicAccessBlockConfiguration"))
    return controls


def canary_answers(signed, anonymous, bucket, key, body):
    """Write the canary ``key`` with the run's credentials, read it anonymously (GET, ranged GET, HEAD,
    a listing of its prefix), delete it; the answers as ``exposure.prove_private`` takes them. The delete
    is sent whenever the write was not refused, and its answer is returned, never dropped."""
    prefix = key.rpartition("/")[0] + "/" if "/" in key else ""
    written = answer_of(lambda: signed.put_object(Bucket=bucket, Key=key, Body=body))[:2]
    probes = {}
    deleted = None
    try:
        if 200 <= written[0] < 300:
            probes["get"] = answer_of(lambda: anonymous.get_object(Bucket=bucket, Key=key))[:2]
            probes["range_get"] = answer_of(
                lambda: anonymous.get_object(Bucket=bucket, Key=key, Range="bytes=0-0")
            )[:2]
            probes["head"] = answer_of(lambda: anonymous.head_object(Bucket=bucket, Key=key))[:2]
            probes["list"] = answer_of(lambda: anonymous.list_objects_v2(Bucket=bucket, Prefix=prefix))[:2]
    finally:
        if written[0] == 0 or 200 <= written[0] < 300:
            deleted = answer_of(lambda: signed.delete_object(Bucket=bucket, Key=key))[:2]
    return {"key": key, "written": written, "probes": probes, "deleted": deleted}
