"""The lab's bearer tokens and the rules ``Lab.add_token`` grants (written as RBAC objects: the API
server decides)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

MUTATING_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@dataclass
class Rule:
    """Allows `verbs` on `resources` ("plural" or "plural/subresource") of `groups` in `namespaces`.
    "*" matches anything; an empty namespaces list means every namespace and the cluster scope."""

    verbs: list[str]
    groups: list[str] = field(default_factory=lambda: ["*"])
    resources: list[str] = field(default_factory=lambda: ["*"])
    namespaces: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict) -> Rule:
        return cls(
            verbs=list(data.get("verbs", [])),
            groups=list(data.get("groups", data.get("apiGroups", ["*"]))),
            resources=list(data.get("resources", ["*"])),
            namespaces=list(data.get("namespaces", [])),
        )


@dataclass
class Identity:
    user: str
    rules: list[Rule] | None  # None: allowed everything (admin)

    @property
    def is_admin(self) -> bool:
        return self.rules is None


class Tokens:
    def __init__(self, admin_token: str | None = None, admin_user: str = "lab-admin"):
        self._by_token: dict[str, Identity] = {}
        self.admin_token = admin_token or secrets.token_urlsafe(24)
        self._by_token[self.admin_token] = Identity(admin_user, None)

    def add(self, user: str, rules: list[dict | Rule] | None, token: str | None = None) -> str:
        token = token or secrets.token_urlsafe(24)
        parsed = None if rules is None else [r if isinstance(r, Rule) else Rule.from_dict(r) for r in rules]
        self._by_token[token] = Identity(user, parsed)
        return token

    def identify(self, authorization: str | None) -> Identity | None:
        if not authorization or not authorization.startswith("Bearer "):
            return None
        return self._by_token.get(authorization[7:].strip())
