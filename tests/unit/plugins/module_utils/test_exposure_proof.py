"""exposure.prove_private: the one decision on a destination before sensitive bytes move."""

from __future__ import annotations

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import exposure
from hypothesis import given, settings
from hypothesis import strategies as st

ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"
OWNER = ("owner-id", "FULL_CONTROL")
PRIVATE_CONTROLS = {
    "policy_status": (404, "NoSuchBucketPolicy", None),
    "acl": (200, None, [OWNER]),
    "public_access_block": (404, "NoSuchPublicAccessBlockConfiguration", None),
}
KMS = ["declared licence kms (KMS-configured)"]


def canary(get=403, range_get=403, head=403, listing=403, written=200, deleted=204):
    return {
        "key": "w/11/.goldenimage-exposure-canary-x",
        "written": (written, None),
        "probes": {
            "get": (get, None),
            "range_get": (range_get, None),
            "head": (head, None),
            "list": (listing, None),
        },
        "deleted": None if deleted is None else (deleted, None),
    }


def test_every_probe_refused_and_no_public_control_is_private():
    proof = exposure.prove_private("b", "w/11/", PRIVATE_CONTROLS, canary(), KMS)
    assert proof["verdict"] == exposure.PRIVATE and proof["allowed"] and proof["refusal"] == ""
    assert proof["public_by"] == [] and proof["not_answered"] == []


@pytest.mark.parametrize("probe", ["get", "range_get", "head", "listing"])
def test_any_2xx_of_a_probe_is_public_and_refused_naming_bucket_probe_and_move(probe):
    status = 206 if probe == "range_get" else 200
    proof = exposure.prove_private("licensed", "w/11/", PRIVATE_CONTROLS, canary(**{probe: status}), KMS)
    assert proof["verdict"] == exposure.PUBLIC and not proof["allowed"]
    name = "list of the prefix" if probe == "listing" else probe.replace("_", " ")
    assert proof["public_by"] == [
        "anonymous %s%s HTTP %d" % (name, "" if probe == "listing" else " of the canary", status)
    ]
    refusal = proof["refusal"]
    assert "bucket licensed is public" in refusal and "HTTP %d" % status in refusal
    assert "source.s3" in refusal and "secretRef" in refusal and "Nothing of the image was written" in refusal


def test_the_get_only_policy_that_fooled_the_empty_prefix_probe_is_public():
    """Anonymous GetObject without ListBucket: the listing is refused, the canary is served."""
    controls = dict(PRIVATE_CONTROLS, policy_status=(200, None, True))
    proof = exposure.prove_private("b", "w/11/", controls, canary(get=200, range_get=206, head=200), KMS)
    assert proof["verdict"] == exposure.PUBLIC and not proof["allowed"]
    assert "GetBucketPolicyStatus IsPublic true" in proof["public_by"]


def test_a_public_control_is_public_even_when_every_probe_is_refused():
    controls = dict(PRIVATE_CONTROLS, acl=(200, None, [OWNER, (ALL_USERS, "READ")]))
    proof = exposure.prove_private("b", "w/", controls, canary(), KMS)
    assert proof["verdict"] == exposure.PUBLIC and proof["public_by"] == ["GetBucketAcl grants AllUsers:READ"]


def test_the_public_access_block_neutralises_what_it_names():
    block = {name: True for name in exposure.BLOCK_SETTINGS}
    controls = {
        "policy_status": (200, None, True),
        "acl": (200, None, [OWNER, (ALL_USERS, "READ")]),
        "public_access_block": (200, None, block),
    }
    proof = exposure.prove_private("b", "w/", controls, canary(), KMS)
    assert proof["verdict"] == exposure.PRIVATE and proof["allowed"]


def test_an_api_that_does_not_answer_is_recorded_not_as_private():
    controls = {
        "policy_status": (501, "NotImplemented", None),
        "acl": (403, "AccessDenied", None),
        "public_access_block": (0, "ConnectionError", None),
    }
    proof = exposure.prove_private("b", "w/", controls, canary(), KMS)
    assert proof["not_answered"] == ["policy_status", "acl", "public_access_block"]
    assert proof["controls"]["policy_status"]["state"] == exposure.NOT_ANSWERED
    # The canary is the proof; the controls that did not answer are reported with it.
    assert proof["verdict"] == exposure.PRIVATE
    refused = exposure.prove_private("b", "w/", controls, canary(get=200), KMS)
    assert "controls not answered: policy_status, acl, public_access_block" in refused["refusal"]


@pytest.mark.parametrize(
    "answers",
    [dict(written=403), dict(written=0), dict(get=0), dict(head=500), dict(listing=404)],
)
def test_no_proof_is_no_private_verdict(answers):
    proof = exposure.prove_private("b", "w/", PRIVATE_CONTROLS, canary(**answers), KMS)
    assert proof["verdict"] == exposure.UNKNOWN and not proof["allowed"]
    assert "is not proven private" in proof["refusal"]


def test_no_canary_at_all_is_no_proof():
    proof = exposure.prove_private("b", "w/", PRIVATE_CONTROLS, None, KMS)
    assert proof["verdict"] == exposure.UNKNOWN and not proof["allowed"]


def test_bytes_that_are_not_sensitive_may_go_anywhere_and_the_verdict_is_still_reported():
    proof = exposure.prove_private("b", "w/", PRIVATE_CONTROLS, canary(get=200), [])
    assert proof["verdict"] == exposure.PUBLIC and proof["allowed"] and proof["refusal"] == ""


@pytest.mark.parametrize("deleted", [None, (403, "AccessDenied"), (0, "ConnectionError")])
def test_a_canary_left_behind_is_reported(deleted):
    answers = canary()
    answers["deleted"] = deleted
    proof = exposure.prove_private("b", "w/", PRIVATE_CONTROLS, answers, KMS)
    assert proof["canary_deleted"] is False
    assert (
        "could not be deleted" in proof["canary_problem"]
        and "w/11/.goldenimage-exposure-canary-x" in proof["canary_problem"]
    )
    refused = exposure.prove_private(
        "b", "w/", PRIVATE_CONTROLS, dict(answers, probes=dict(answers["probes"], get=(200, None))), KMS
    )
    assert "could not be deleted" in refused["refusal"]


def test_sensitive_reasons_join_the_licence_and_the_facts_reasons():
    assert exposure.sensitive_reasons("none") == []
    assert exposure.sensitive_reasons("byol", facts_reasons=["product key in SOFTWARE hive"]) == [
        "product key in SOFTWARE hive"
    ]
    assert exposure.sensitive_reasons("kms", facts_reasons=["x", "x"]) == [
        "declared licence kms (KMS-configured)",
        "x",
    ]
    with pytest.raises(exposure.ExposureError):
        exposure.sensitive_reasons("bogus")


def test_the_remedy_advises_source_s3_not_an_http_secret_ref():
    text = exposure.remedy("b", "w/", ["get"])
    assert "source.s3" in text and "secretRef" in text and "accessKeyId" in text


def test_the_canary_sits_under_the_destination_prefix_and_ends_with_its_file_name():
    key = exposure.canary_key("windows/11/2026-09-01/windows11-x64-golden.qcow2", "ab12")
    assert key.startswith("windows/11/2026-09-01/.goldenimage-exposure-canary-ab12")
    assert key.endswith("-windows11-x64-golden.qcow2")
    assert exposure.canary_key("top.qcow2", "t") == ".goldenimage-exposure-canary-t-top.qcow2"


# GetBucketAcl of a public-read bucket as versitygw v1.8.0 answers it: AllUsers is a Group named by ID.
VERSITYGW_ALL_USERS = ("all-users", "READ", "Group")


def test_a_group_grant_named_by_id_is_public():
    controls = dict(PRIVATE_CONTROLS, acl=(200, None, [OWNER + ("CanonicalUser",), VERSITYGW_ALL_USERS]))
    proof = exposure.prove_private("b", "w/", controls, canary(), KMS)
    assert proof["verdict"] == exposure.PUBLIC and proof["public_by"] == [
        "GetBucketAcl grants all-users:READ"
    ]


def test_log_delivery_and_accounts_are_not_public():
    log_delivery = ("http://acs.amazonaws.com/groups/s3/LogDelivery", "WRITE", "Group")
    account = ("all-users", "READ", "CanonicalUser")  # an account that happens to be called so
    controls = dict(PRIVATE_CONTROLS, acl=(200, None, [OWNER, log_delivery, account]))
    proof = exposure.prove_private("b", "w/", controls, canary(), KMS)
    assert proof["verdict"] == exposure.PRIVATE and proof["public_by"] == []


@settings(max_examples=200, deadline=None)
@given(
    grantee=st.one_of(st.sampled_from(exposure.PUBLIC_GROUP_URIS + exposure.PRIVATE_GROUP_URIS), st.text()),
    grantee_type=st.sampled_from([None, "Group", "CanonicalUser", "AmazonCustomerByEmail"]),
    permission=st.sampled_from(["READ", "WRITE", "READ_ACP", "WRITE_ACP", "FULL_CONTROL"]),
)
def test_every_group_grant_but_log_delivery_is_public(grantee, grantee_type, permission):
    """A grant is public when it names AllUsers or AuthenticatedUsers by URI, or any Group but log delivery
    by any name: a server's own name for the public never reads as private."""
    judged = exposure.judge_control("acl", 200, None, [OWNER, (grantee, permission, grantee_type)])
    public = grantee in exposure.PUBLIC_GROUP_URIS or (
        grantee_type == "Group" and grantee not in exposure.PRIVATE_GROUP_URIS
    )
    assert judged["public"] is public
