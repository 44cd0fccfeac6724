"""The shapes the lab's controllers and the front share: API errors, resource types, watch events.

Pure data and helpers, no I/O: ``ApiStore`` (apistore.py) raises ``ApiError`` for the API server's
Status answers, describes each served kind with a ``ResourceType`` and yields ``Event`` s from its
watches; controllers raise the same errors from their admission hooks (``TypeHooks``), and the front
turns them into the admission webhook's answer.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

_CONFLICT_MSG = "the object has been modified; please apply your changes to the latest version and try again"


class ApiError(Exception):
    """An error the API answers with a metav1 Status."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}

    def status(self) -> dict:
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def _details(rt: ResourceType, name: str) -> dict:
    details = {"name": name, "kind": rt.plural}
    if rt.group:
        details["group"] = rt.group
    return details


def _qualified(rt: ResourceType) -> str:
    return f"{rt.plural}.{rt.group}" if rt.group else rt.plural


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{_qualified(rt)} "{name}" not found', _details(rt, name))


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{_qualified(rt)} "{name}" already exists', _details(rt, name))


def conflict(rt: ResourceType, name: str, msg: str = _CONFLICT_MSG) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(rt)} "{name}": {msg}',
        _details(rt, name),
    )


def invalid(rt: ResourceType, name: str, causes: list[dict]) -> ApiError:
    kind_group = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    message = invalid_message(kind_group, name, causes)
    details = dict(_details(rt, name), kind=rt.kind, causes=causes)
    return ApiError(422, "Invalid", message, details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


@dataclass
class ResourceType:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    singular: str = ""
    short_names: list[str] = field(default_factory=list)
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = (
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    )
    schema: dict | None = None
    categories: list[str] = field(default_factory=list)
    custom: bool = False  # served from a CustomResourceDefinition

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return self.kind + "List"


@dataclass
class Event:
    type: str  # ADDED | MODIFIED | DELETED
    rt: ResourceType
    obj: dict
    resource_version: int


def clone(value: Any) -> Any:
    """Deep copy of JSON-shaped data (faster than copy.deepcopy)."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def invalid_message(kind: str, name: str, causes: list[dict], group: str = "") -> str:
    """The Status message of a 422: `Kind.group "name" is invalid: field: message` ([..] for many).

    `kind` may already be qualified ("VirtualMachineImage.harvesterhci.io"); `group` appends one.
    """
    qualified = "%s.%s" % (kind, group) if group else kind
    parts = ["%s: %s" % (c["field"], c["message"]) if c.get("field") else c["message"] for c in causes]
    detail = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    return '%s "%s" is invalid: %s' % (qualified, name, detail)


class TypeHooks:
    """Per-type behaviour a controller adds to a kind: admission (defaults, checks) and write side effects."""

    def prepare_create(self, store, rt: ResourceType, obj: dict) -> None:
        """Fill defaults on a new object."""

    def prepare_update(self, store, rt: ResourceType, old: dict, new: dict) -> None:
        """Normalize an updated object."""

    def after_write(self, store, rt: ResourceType, obj: dict) -> None:
        """Runs under the store lock after a create or update was stored."""

    def after_delete(self, store, rt: ResourceType, obj: dict) -> None:
        """Runs under the store lock after the object was removed."""
