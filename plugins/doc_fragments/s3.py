# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # The connection options without validate_certs, for a module that also talks to a cluster: it shares
    # kubernetes.core's validate_certs (its verify_ssl alias and K8S_AUTH_VERIFY_SSL fallback included).
    CONNECTION = r"""
notes:
  - This module is in the C(goldenimage.pipeline.s3) action group. Set the endpoint and credentials once for
    every module of the group with C(module_defaults), under C(group/goldenimage.pipeline.s3).
options:
  endpoint_url:
    description:
      - URL of an S3-compatible endpoint (Ceph RGW, MinIO, a loopback test server). Omit for AWS S3.
      - An endpoint URL with user-info (C(https://key:secret@host)) is refused before any request; give the
        keys in O(access_key) and O(secret_key).
      - When set, requests use path-style addressing (C(https://host/bucket/key)), which every
        S3-compatible server accepts.
      - Falls back to the E(AWS_ENDPOINT_URL_S3), then E(AWS_ENDPOINT_URL) environment variable.
    type: str
    aliases: [s3_url, aws_endpoint_url]
  access_key:
    description:
      - The access key ID.
      - Falls back to E(AWS_ACCESS_KEY_ID), then E(AWS_ACCESS_KEY), then the usual boto3 credential chain
        (profile, instance role).
    type: str
    aliases: [aws_access_key_id, aws_access_key]
  secret_key:
    description:
      - The secret access key. Never logged.
      - Falls back to E(AWS_SECRET_ACCESS_KEY), then E(AWS_SECRET_KEY).
    type: str
    aliases: [aws_secret_access_key, aws_secret_key]
  session_token:
    description:
      - A session token for temporary credentials. Never logged.
      - Falls back to E(AWS_SESSION_TOKEN).
    type: str
    aliases: [aws_session_token]
  region:
    description:
      - The region to sign requests for. Most S3-compatible servers accept any value.
      - Falls back to E(AWS_REGION), then E(AWS_DEFAULT_REGION); C(us-east-1) when none is set.
    type: str
    aliases: [aws_region]
  ca_bundle:
    description:
      - A PEM file of CA certificates to verify the endpoint with (a private CA).
      - Falls back to E(AWS_CA_BUNDLE).
    type: path
    aliases: [aws_ca_bundle]
  profile:
    description:
      - A profile of the AWS config and credentials files to take the keys (and its settings) from, as
        amazon.aws modules take it. Refused together with O(access_key), O(secret_key) or O(session_token).
      - Falls back to E(AWS_PROFILE), then E(AWS_DEFAULT_PROFILE).
    type: str
    aliases: [aws_profile]
  aws_config:
    description:
      - Parameters of botocore's C(Config) laid over the collection's (timeouts, C(s3) addressing, a proxy),
        as amazon.aws modules take them. An unknown parameter is refused before any request.
      - The retries are botocore's C(standard) mode, five attempts per request in all; a C(retries) entry
        here replaces that.
    type: dict
requirements:
  - boto3 (on the controller)
"""

    DOCUMENTATION = CONNECTION.replace(
        "  ca_bundle:\n",
        r"""  validate_certs:
    description:
      - Verify the endpoint's TLS certificate. Turn off only for a test endpoint.
    type: bool
    default: true
  ca_bundle:
""",
        1,
    )
