# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The S3 modules' side of the S3 adapter: their connection options and their AnsibleModule.

The options follow amazon.aws's ``aws_argument_spec()``: the same names, aliases and environment
fallbacks (``access_key``/``aws_access_key``, ``endpoint_url``/``aws_endpoint_url``, ``profile``,
``aws_config``, ...), so a ``module_defaults`` entry written for amazon.aws fits. The spec is declared
here rather than taken from amazon.aws, and the modules are plain AnsibleModules rather than
``AnsibleAWSModule``, because: golden_export_job is a kubernetes.core module too (one module object
cannot be both); ``AnsibleAWSModule`` wraps every client in ``AWSRetry``, a second retry loop on top of
botocore's, which the S3 retry policy (``_s3.retry_config``) is alone; and the S3 client is shared with
the export Job's program, which runs in a pod with boto3 and without Ansible or amazon.aws.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.module_utils.basic import AnsibleModule, env_fallback
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import redact
from ansible_collections.goldenimage.pipeline.plugins.module_utils.s3._s3 import s3_client

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
        "fallback": (env_fallback, ["AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY"]),
    },
    "secret_key": {
        "type": "str",
        "no_log": True,
        "aliases": ["aws_secret_access_key", "aws_secret_key"],
        "fallback": (env_fallback, ["AWS_SECRET_ACCESS_KEY", "AWS_SECRET_KEY"]),
    },
    "session_token": {
        "type": "str",
        "no_log": True,
        "aliases": ["aws_session_token"],
        "fallback": (env_fallback, ["AWS_SESSION_TOKEN"]),
    },
    "profile": {
        "type": "str",
        "aliases": ["aws_profile"],
        "fallback": (env_fallback, ["AWS_PROFILE", "AWS_DEFAULT_PROFILE"]),
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
    "aws_config": {"type": "dict"},
}


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


def hide_url_secrets(module, options):
    """Mask the secret parts of the URL options in every output of ``module`` (invocation included)."""
    for option in options:
        value = module.params.get(option)
        if isinstance(value, str):
            for secret in redact.url_secrets(value):
                module.no_log_values.add(secret)


def s3_client_from_params(params, **options):
    """A client from a module's (or a role's) S3_ARG_SPEC parameters; ``options`` go to s3_client."""
    connection = {key: params.get(key) for key in S3_ARG_SPEC if key in params}
    return s3_client(**dict(connection, **options))
