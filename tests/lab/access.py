"""Who may do what in the lab (bearer tokens and a small RBAC rule table), and the audit log."""

from __future__ import annotations

import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass, field

AUDIT_LIMIT = 200_000
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

    def allows(self, verb: str, group: str, resource: str, namespace: str) -> bool:
        base = resource.split("/", 1)[0]
        return (
            ("*" in self.verbs or verb in self.verbs)
            and ("*" in self.groups or group in self.groups)
            and ("*" in self.resources or resource in self.resources or base in self.resources)
            and (not self.namespaces or "*" in self.namespaces or namespace in self.namespaces)
        )


@dataclass
class Identity:
    user: str
    rules: list[Rule] | None  # None: allowed everything (admin)

    @property
    def is_admin(self) -> bool:
        return self.rules is None

    def allows(self, verb: str, group: str, resource: str, namespace: str) -> bool:
        if self.rules is None:
            return True
        return any(rule.allows(verb, group, resource, namespace) for rule in self.rules)


def forbidden_message(user: str, verb: str, group: str, resource: str, namespace: str, name: str) -> str:
    what = f'{resource} "{name}"' if name else resource
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    who = f'User "{user}" cannot {verb} resource "{resource}"'
    return f'{what} is forbidden: {who} in API group "{group}" {scope}'


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

    def remove(self, token: str) -> None:
        if token != self.admin_token:
            self._by_token.pop(token, None)

    def identify(self, authorization: str | None) -> Identity | None:
        if not authorization or not authorization.startswith("Bearer "):
            return None
        return self._by_token.get(authorization[7:].strip())


class AuditLog:
    """Every API request: time (epoch seconds), seq, verb, path, user, dry_run, code, namespace,
    group, resource, subresource, name."""

    def __init__(self):
        self._lock = threading.Lock()
        self._records: deque[dict] = deque(maxlen=AUDIT_LIMIT)
        self._seq = 0

    def append(self, record: dict) -> None:
        with self._lock:
            self._seq += 1
            record["seq"] = self._seq
            record.setdefault("time", time.time())
            self._records.append(record)

    def records(self) -> list[dict]:
        with self._lock:
            return [dict(r) for r in self._records]

    def clear(self) -> None:
        with self._lock:
            self._records.clear()

    def mutating(self) -> list[dict]:
        return [r for r in self.records() if r["verb"] in MUTATING_VERBS and not r["dry_run"]]
