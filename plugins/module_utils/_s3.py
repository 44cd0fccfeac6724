# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""S3 adapter: the boto3 client factories (signed and anonymous) and a jittered backoff.

boto3 is imported on first use. ``s3_client`` signs with the caller's credentials;
``anonymous_client`` signs nothing, so its requests are what anyone on the network can send (the
bucket exposure probes). An endpoint URL that carries user-info is refused before either is built:
the URL is printed and recorded, and S3 takes its keys from ``access_key``/``secret_key``. Failures
raise ``S3Error`` (a PipelineError), so a module fails with them in one place.

botocore's "standard" retry mode already retries throttling and 5xx answers; ``jittered_backoff``
adds the codes an S3-compatible store returns for a while right after a write (a bucket that was
just created answers NoSuchBucket), with full jitter so parallel workers do not retry in lockstep.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools
import random
import time

from ansible.module_utils.basic import AnsibleModule, env_fallback, missing_required_lib
from ansible_collections.goldenimage.pipeline.plugins.module_utils import redact
from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import PipelineError

S3_ARG_SPEC = {
    "endpoint_url": {
        "type": "str",
        "aliases": ["s3_url", "aws_endpoint_url"],
        "fallback": (env_fallback, ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"]),
    },
    # The key id names the credential; only the secret and the token are confidential.
    "access_key": {
        "type": "str",
        "no_log": False,
        "aliases": ["aws_access_key_id", "aws_access_key"],
        "fallback": (env_fallback, ["AWS_ACCESS_KEY_ID"]),
    },
    "secret_key": {
        "type": "str",
        "no_log": True,
        "aliases": ["aws_secret_access_key", "aws_secret_key"],
        "fallback": (env_fallback, ["AWS_SECRET_ACCESS_KEY"]),
    },
    "session_token": {
        "type": "str",
        "no_log": True,
        "aliases": ["aws_session_token"],
        "fallback": (env_fallback, ["AWS_SESSION_TOKEN"]),
    },
    "region": {
        "type": "str",
        "aliases": ["aws_region"],
        "fallback": (env_fallback, ["AWS_REGION", "AWS_DEFAULT_REGION"]),
    },
    "validate_certs": {"type": "bool", "default": True},
    "ca_bundle": {
        "type": "path",
        "aliases": ["aws_ca_bundle"],
        "fallback": (env_fallback, ["AWS_CA_BUNDLE"]),
    },
}

# Codes worth another try whatever the call: throttling and a server that is briefly unwell.
RETRYABLE_CODES = frozenset(
    (
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "SlowDown",
        "RequestTimeout",
        "RequestTimeoutException",
        "ServiceUnavailable",
        "InternalError",
        "500",
        "502",
        "503",
        "504",
    )
)
# Codes that mean "not visible yet" right after a create. Pass extra_codes=() for an existence check.
EVENTUAL_CONSISTENCY_CODES = ("NoSuchBucket",)
# Registers the payload-hash hook of sign_with_sent_checksum once per client and operation.
PAYLOAD_HASH_HOOK = "goldenimage-payload-hash"


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
    """boto3 is not importable on the controller; the message is Ansible's standard one."""


def s3_arg_spec(**options):
    """The argument spec of an S3 module: its ``options`` and the S3 connection options."""
    return dict(options, **S3_ARG_SPEC)


def s3_module(argument_spec, hidden=(), **rules):
    """The AnsibleModule of an S3 module (check mode supported); ``endpoint_url`` and the URL options in
    ``hidden`` are kept out of the log with their secrets (``hide_url_secrets``). ``rules`` are
    AnsibleModule's (mutually_exclusive, required_one_of, ...)."""
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True, **rules)
    hide_url_secrets(module, tuple(hidden) + ("endpoint_url",))
    return module


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


def hide_url_secrets(module, options):
    """Mask the secret parts of the URL options in every output of ``module`` (invocation included)."""
    for option in options:
        value = module.params.get(option)
        if isinstance(value, str):
            for secret in redact.url_secrets(value):
                module.no_log_values.add(secret)


def error_code(exc):
    """The S3 error code of a botocore ClientError (``NoSuchBucket``, ``SlowDown``, ``404``), else None."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    code = (response.get("Error") or {}).get("Code")
    return str(code) if code is not None else None


def backoff_delay(attempt, delay, max_delay, rng=random.random):
    """Full jitter: uniform in [0, min(max_delay, delay * 2**attempt))."""
    return rng() * min(max_delay, delay * (2**attempt))


def jittered_backoff(
    retries=10,
    delay=1.0,
    max_delay=30.0,
    extra_codes=EVENTUAL_CONSISTENCY_CODES,
    sleeper=time.sleep,
    rng=random.random,
):
    """Decorator: retry a boto3 call up to ``retries`` times on retryable error codes.

    ``extra_codes`` adds codes for this call (``NoSuchBucket`` by default, for the window after a
    bucket is created). Any other error is raised at once. Use as ``@jittered_backoff(...)`` or
    ``jittered_backoff(...)(client.head_object)(Bucket=..., Key=...)``.
    """
    codes = RETRYABLE_CODES | frozenset(extra_codes or ())

    def decorate(func):
        @functools.wraps(func)
        def call(*args, **kwargs):
            attempt = 0
            while True:
                try:
                    return func(*args, **kwargs)
                except Exception as exc:
                    if attempt >= retries or error_code(exc) not in codes:
                        raise
                    sleeper(backoff_delay(attempt, delay, max_delay, rng))
                    attempt += 1

        return call

    return decorate


def s3_client(
    endpoint_url=None,
    access_key=None,
    secret_key=None,
    session_token=None,
    region=None,
    validate_certs=True,
    ca_bundle=None,
    max_attempts=5,
    max_pool_connections=10,
    signature_version=None,
):
    """A boto3 S3 client with standard-mode retries; path-style addressing for a custom endpoint.

    ``max_pool_connections`` bounds the HTTP connections; raise it to at least the number of threads
    that share the client (concurrent multipart uploads), or they queue for a connection.
    """
    check_endpoint(endpoint_url)
    boto3, Config = _boto3()
    options = {
        "retries": {"mode": "standard", "total_max_attempts": max_attempts},
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
    session = boto3.session.Session(
        aws_access_key_id=access_key or None,
        aws_secret_access_key=secret_key or None,
        aws_session_token=session_token or None,
        region_name=region or None,
    )
    verify = False if validate_certs is False else (ca_bundle or True)
    return session.client("s3", endpoint_url=endpoint_url or None, verify=verify, config=Config(**options))


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
        raise MissingBoto3(missing_required_lib("boto3", reason="to talk to S3")) from exc
    return boto3, Config


def anonymous_client(endpoint_url=None, region=None, validate_certs=True, ca_bundle=None, timeout=20):
    """An S3 client that signs nothing: its requests are what anyone on the network can send.

    Two attempts at most, each bounded by ``timeout`` seconds, so a probe that gets no answer ends.
    """
    check_endpoint(endpoint_url)
    boto3, Config = _boto3()
    from botocore import UNSIGNED

    options = {
        "signature_version": UNSIGNED,
        "retries": {"mode": "standard", "total_max_attempts": 2},
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
        return boto3.session.Session().get_credentials() is not None
    except Exception:
        return False


def s3_client_from_params(params, **options):
    """A client from a module's (or a role's) S3_ARG_SPEC parameters; ``options`` go to s3_client."""
    connection = {key: params.get(key) for key in S3_ARG_SPEC if key in params}
    return s3_client(**dict(connection, **options))


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
    ``exposure.prove_private`` (policy_status: IsPublic; acl: ``[(grantee URI or id, permission)]``;
    public_access_block: the configuration)."""
    status, code, found = answer_of(lambda: signed.get_bucket_policy_status(Bucket=bucket))
    controls = {"policy_status": (status, code, ((found or {}).get("PolicyStatus") or {}).get("IsPublic"))}
    status, code, found = answer_of(lambda: signed.get_bucket_acl(Bucket=bucket))
    grants = [
        ((g.get("Grantee") or {}).get("URI") or (g.get("Grantee") or {}).get("ID") or "", g.get("Permission"))
        for g in (found or {}).get("Grants") or []
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
