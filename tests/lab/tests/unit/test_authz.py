"""The lab's RBAC rule matching, as the API server's RBAC authorizer matches rules."""

from tests.lab.controllers.authz import rule_allows

SOURCE = {"verb": "create", "group": "cdi.kubevirt.io", "resource": "datavolumes", "subresource": "source"}
COPY_DV = {"apiGroups": ["cdi.kubevirt.io"], "resources": ["datavolumes/source"], "verbs": ["create"]}


def test_a_subresource_rule_allows_only_the_subresource():
    assert rule_allows(COPY_DV, SOURCE)
    assert not rule_allows(COPY_DV, dict(SOURCE, subresource=""))
    assert not rule_allows(COPY_DV, dict(SOURCE, verb="delete"))
    assert not rule_allows(COPY_DV, dict(SOURCE, group=""))


def test_wildcards_and_resource_names():
    assert rule_allows({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, SOURCE)
    assert rule_allows(
        {"apiGroups": ["cdi.kubevirt.io"], "resources": ["datavolumes/*"], "verbs": ["create"]}, SOURCE
    )
    named = dict(COPY_DV, resourceNames=["golden"])
    assert rule_allows(named, dict(SOURCE, name="golden"))
    assert not rule_allows(named, dict(SOURCE, name="other"))
