"""What lab controllers add to the API server for their kinds: extra HTTP routes and admission checks.

A platform adds more than CRDs: Harvester serves an upload action outside the Kubernetes API and refuses
some deletes with a validating webhook. A controller registers those here, against the store it runs
on (one lab, one store), and the HTTP server consults them on every request.

    route(method, path, query, headers, raw, identity) -> (code, content_type, body bytes)
    admission(verb, rt, namespace, name, body, dry_run) -> None, or raise ApiError to refuse
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .objects import ResourceType

if TYPE_CHECKING:
    from .apistore import ApiStore

Route = Callable[..., tuple[int, str, bytes]]
Admission = Callable[[str, ResourceType, str, str, object, bool], None]


@dataclass
class Extensions:
    routes: dict[str, Route] = field(default_factory=dict)  # path prefix -> handler
    admission: dict[tuple[str, str], list[Admission]] = field(default_factory=dict)  # (group, plural)


_lock = threading.Lock()
_registry: weakref.WeakKeyDictionary[ApiStore, Extensions] = weakref.WeakKeyDictionary()


def extensions(store: ApiStore) -> Extensions:
    with _lock:
        found = _registry.get(store)
        if found is None:
            found = _registry[store] = Extensions()
        return found


def add_route(store: ApiStore, prefix: str, handler: Route) -> None:
    extensions(store).routes[prefix] = handler


def add_admission(store: ApiStore, group: str, plural: str, check: Admission) -> None:
    extensions(store).admission.setdefault((group, plural), []).append(check)


def route_for(store: ApiStore, path: str) -> Route | None:
    found = _registry.get(store)
    if not found:
        return None
    for prefix, handler in found.routes.items():
        if path.startswith(prefix):
            return handler
    return None


def admit(
    store: ApiStore, verb: str, rt: ResourceType, namespace: str, name: str, body, dry_run: bool
) -> None:
    found = _registry.get(store)
    if not found:
        return
    for check in found.admission.get((rt.group, rt.plural), ()):
        check(verb, rt, namespace, name, body, dry_run)


__all__ = ["Extensions", "add_admission", "add_route", "admit", "extensions", "route_for"]
