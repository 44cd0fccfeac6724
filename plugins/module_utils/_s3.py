# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""S3 adapter: one boto3 client factory and a jittered backoff for eventual consistency.

boto3 is imported on first use. botocore's "standard" retry mode already retries throttling and
5xx answers; ``jittered_backoff`` adds the codes an S3-compatible store returns for a while right
after a write (a bucket that was just created answers NoSuchBucket), with full jitter so parallel
workers do not retry in lockstep.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools
import random
import time

from ansible.module_utils.basic import env_fallback, missing_required_lib

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


class MissingBoto3(Exception):
    """boto3 is not importable on the controller; the message is Ansible's standard one."""


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
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:
        raise MissingBoto3(missing_required_lib("boto3", reason="to talk to S3")) from exc
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


def s3_client_from_params(params, **options):
    """A client from a module's (or a role's) S3_ARG_SPEC parameters; ``options`` go to s3_client."""
    connection = {key: params.get(key) for key in S3_ARG_SPEC if key in params}
    return s3_client(**dict(connection, **options))


def s3_client_for_module(module, **options):
    """Like s3_client_from_params, failing ``module`` with the standard message when boto3 is missing."""
    try:
        return s3_client_from_params(module.params, **options)
    except MissingBoto3 as exc:
        module.fail_json(msg=str(exc))
