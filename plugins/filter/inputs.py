# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Input normalisations as filters (inputs.base_url, artifact.bare_digest, iso.claim_size), so roles join
and compare values without regular expressions or arithmetic in Jinja, and the refusal of a URL with
credentials (redact.refuse_credentials), so a role refuses it with the rule every module applies, and the
form of a URL a record may keep (redact.storable_url)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import artifact
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs, redact
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.windows import iso


def base_url(value):
    """``value`` without surrounding blanks and trailing ``/``, ready for ``~ '/' ~ path``."""
    return inputs.base_url(value)


def bare_digest(value, algorithm="sha256"):
    """The digest lower case, without its ``<algorithm>:`` prefix; ``""`` stays ``""``."""
    try:
        return artifact.bare_digest(value, algorithm)
    except PipelineError as exc:
        raise AnsibleFilterError("bare_digest: %s" % exc.msg) from None


def iso_claim_size(iso_bytes, requested=""):
    """The quantity string of the claim an ISO of ``iso_bytes`` is imported into (``requested`` wins)."""
    try:
        return iso.claim_size(iso_bytes, requested)
    except PipelineError as exc:
        raise AnsibleFilterError("iso_claim_size: %s" % exc.msg) from None


def url_without_credentials(value, option="url", move=None):
    """``value`` when it is empty or a URL without user-info; a URL with credentials fails the task, the
    message naming ``option``, the URL redacted and ``move`` (the supported alternative)."""
    if value is None or value == "":
        return ""
    try:
        return redact.refuse_credentials(
            str(value),
            option,
            move or "give the URL without credentials, and the credentials in their own options",
        )
    except PipelineError as exc:
        raise AnsibleFilterError(exc.msg) from None


def storable_url(value):
    """``value`` as a record kept outside the run may hold it (a manifest, a catalog): a signed query
    dropped, user-info masked; a local path stays as it is."""
    if value is None or value == "":
        return ""
    return redact.storable_url(str(value))


class FilterModule(object):
    def filters(self):
        return {
            "base_url": base_url,
            "bare_digest": bare_digest,
            "iso_claim_size": iso_claim_size,
            "url_without_credentials": url_without_credentials,
            "storable_url": storable_url,
        }
