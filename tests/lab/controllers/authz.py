"""Authorization in the lab: RBAC objects and the access reviews that evaluate them.

The lab's own bearer tokens keep their rule table (access.py); this adds what a cluster has besides:
`rbac.authorization.k8s.io/v1` Roles, ClusterRoles and their bindings as stored objects, and
`authorization.k8s.io/v1` SubjectAccessReview / SelfSubjectAccessReview, answered as the API server
answers them (created, never stored). A SubjectAccessReview is decided by the RBAC objects alone: the
bindings whose subjects match the user, its groups or its service account, and the rules of the role
they name. A SelfSubjectAccessReview asks for the caller: the lab's token rules, then RBAC for its user.
"""

from __future__ import annotations

import json

from ..builtin import _rt
from ..extensions import add_route
from ..objects import ApiError, now_rfc3339
from . import Controller, LabContext

RBAC_GROUP = "rbac.authorization.k8s.io"
AUTHZ_GROUP = "authorization.k8s.io"
PREFIX = f"/apis/{AUTHZ_GROUP}/v1/"
REVIEWS = {
    "subjectaccessreviews": "SubjectAccessReview",
    "selfsubjectaccessreviews": "SelfSubjectAccessReview",
}

RBAC_TYPES = [
    _rt(RBAC_GROUP, "v1", "Role", "roles", True),
    _rt(RBAC_GROUP, "v1", "RoleBinding", "rolebindings", True),
    _rt(RBAC_GROUP, "v1", "ClusterRole", "clusterroles", False),
    _rt(RBAC_GROUP, "v1", "ClusterRoleBinding", "clusterrolebindings", False),
]
REVIEW_TYPES = [
    _rt(AUTHZ_GROUP, "v1", kind, plural, False, verbs=("create",)) for plural, kind in REVIEWS.items()
]


def _matches(values, wanted: str) -> bool:
    values = values or []
    return "*" in values or wanted in values


def rule_allows(rule: dict, attrs: dict) -> bool:
    resource = attrs.get("resource") or ""
    if attrs.get("subresource"):
        resource = f"{resource}/{attrs['subresource']}"
    resources = rule.get("resources") or []
    return (
        _matches(rule.get("verbs"), attrs.get("verb") or "")
        and _matches(rule.get("apiGroups"), attrs.get("group") or "")
        and ("*" in resources or resource in resources or f"{resource.split('/')[0]}/*" in resources)
        and (not rule.get("resourceNames") or not attrs.get("name") or attrs["name"] in rule["resourceNames"])
    )


def _subject_matches(subject: dict, user: str, groups: list[str], binding_ns: str) -> bool:
    kind = subject.get("kind")
    if kind == "User":
        return subject.get("name") == user
    if kind == "Group":
        return subject.get("name") in groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_ns
        return user == f"system:serviceaccount:{namespace}:{subject.get('name')}"
    return False


class AuthorizationController(Controller):
    """Serves RBAC objects and answers access reviews; it reconciles nothing."""

    name = "authorization"
    watches = ()

    def __init__(self, lab: LabContext):
        super().__init__(lab)
        for rt in RBAC_TYPES + REVIEW_TYPES:
            try:
                lab.store.resource(rt.group, rt.version, rt.plural)
            except ApiError:
                lab.store.register(rt)
        add_route(lab.store, PREFIX + "subjectaccessreviews", self.review)
        add_route(lab.store, PREFIX + "selfsubjectaccessreviews", self.review)

    # --- RBAC
    def _items(self, plural: str, namespace: str | None = None) -> list[dict]:
        rt = self.lab.store.resource(RBAC_GROUP, "v1", plural)
        items = self.lab.store.list(rt)[0]
        if namespace is not None:
            items = [i for i in items if i["metadata"].get("namespace") == namespace]
        return items

    def _role_rules(self, ref: dict, binding_ns: str) -> list[dict]:
        kind, name = ref.get("kind"), ref.get("name")
        plural, namespace = ("clusterroles", None) if kind == "ClusterRole" else ("roles", binding_ns)
        for role in self._items(plural, namespace):
            if role["metadata"]["name"] == name:
                return role.get("rules") or []
        return []

    def decide(self, user: str, groups: list[str], attrs: dict) -> tuple[bool, str]:
        namespace = attrs.get("namespace") or ""
        bindings = [(b, "") for b in self._items("clusterrolebindings")]
        if namespace:
            bindings += [(b, namespace) for b in self._items("rolebindings", namespace)]
        for binding, binding_ns in bindings:
            subjects = [
                s for s in binding.get("subjects") or [] if _subject_matches(s, user, groups, binding_ns)
            ]
            if not subjects:
                continue
            ref = binding.get("roleRef") or {}
            if any(rule_allows(rule, attrs) for rule in self._role_rules(ref, binding_ns)):
                kind = "RoleBinding" if binding_ns else "ClusterRoleBinding"
                where = (
                    f"{binding['metadata']['name']}/{binding_ns}"
                    if binding_ns
                    else binding["metadata"]["name"]
                )
                who = f'{subjects[0].get("kind")} "{subjects[0].get("name")}"'
                return (
                    True,
                    f'RBAC: allowed by {kind} "{where}" of {ref.get("kind")} "{ref.get("name")}" to {who}',
                )
        return False, ""

    # --- the endpoint
    def review(self, method, path, query, headers, raw, identity) -> tuple[int, str, bytes]:
        plural = path[len(PREFIX) :].strip("/")
        if plural not in REVIEWS:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if method != "POST":
            raise ApiError(405, "MethodNotAllowed", f"the server does not allow {method} on {plural}")
        if not identity.allows("create", AUTHZ_GROUP, plural, ""):
            raise ApiError(
                403,
                "Forbidden",
                f'{plural}.{AUTHZ_GROUP} is forbidden: User "{identity.user}" cannot create resource '
                f'"{plural}" in API group "{AUTHZ_GROUP}" at the cluster scope',
            )
        try:
            body = json.loads(raw or b"{}")
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"error decoding request body: {exc}") from exc
        spec = body.get("spec") or {}
        attrs = spec.get("resourceAttributes") or {}
        if plural == "selfsubjectaccessreviews":
            user, groups = identity.user, ["system:authenticated"]
            if identity.allows(
                attrs.get("verb") or "",
                attrs.get("group") or "",
                "/".join(filter(None, (attrs.get("resource"), attrs.get("subresource")))),
                attrs.get("namespace") or "",
            ):
                allowed, reason = True, "allowed by the lab's token rules"
            else:
                allowed, reason = self.decide(user, groups, attrs)
        else:
            user, groups = spec.get("user") or "", list(spec.get("groups") or [])
            if not user and not groups:
                raise ApiError(422, "Invalid", "at least one of user or group must be specified")
            allowed, reason = self.decide(user, groups, attrs)
        answer = {
            "apiVersion": f"{AUTHZ_GROUP}/v1",
            "kind": REVIEWS[plural],
            "metadata": {"creationTimestamp": now_rfc3339()},
            "spec": spec,
            "status": {"allowed": allowed, **({"reason": reason} if reason else {})},
        }
        return 201, "application/json", json.dumps(answer).encode()


CONTROLLERS = [AuthorizationController]

__all__ = ["AUTHZ_GROUP", "CONTROLLERS", "RBAC_GROUP", "AuthorizationController", "rule_allows"]
