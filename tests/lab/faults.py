"""Fault injection knobs of the lab.

The HTTP server consults the rates on every API request; controllers consult the per-object faults.
With a seed the sequence of injected faults is reproducible.
"""

from __future__ import annotations

import random
import threading
from typing import Any

# "stop-hangs", "swap-conflict" and "no-agent" are the repave faults of VMs and DBInstances.
OBJECT_FAULTS = ("stuck", "fail", "stop-hangs", "swap-conflict", "no-agent")
_FIELDS = ("conflict_rate", "error_rate", "latency_ms", "drop_rate", "commit_drop_rate", "seed")
_RATES = ("conflict_rate", "error_rate", "drop_rate", "commit_drop_rate")


class Faults:
    """Knobs: conflict_rate, error_rate (500 and 503 alternating), latency_ms, drop_rate,
    commit_drop_rate (a mutating request is applied, then its connection is closed before the answer:
    the lost reply after a commit), and objects: "<kind>/<namespace>/<name>" -> "stuck" | "fail"
    (namespace empty for cluster scope)."""

    def __init__(
        self,
        conflict_rate: float = 0.0,
        error_rate: float = 0.0,
        latency_ms: int = 0,
        drop_rate: float = 0.0,
        commit_drop_rate: float = 0.0,
        objects: dict[str, str] | None = None,
        seed: int | None = None,
    ):
        self._lock = threading.Lock()
        self.conflict_rate = conflict_rate
        self.error_rate = error_rate
        self.latency_ms = latency_ms
        self.drop_rate = drop_rate
        self.commit_drop_rate = commit_drop_rate
        self.objects: dict[str, str] = {}
        self.seed = seed
        self._rng = random.Random(seed)
        self._next_error = 500
        self.injected = {"conflict": 0, "error": 0, "drop": 0, "commit_drop": 0}
        # How many times a request knob (a rate or the latency) was set above zero: the fault proxy sees
        # only the clients given the fault kubeconfig, so a test that arms a knob must use one.
        self.armed = 0
        for key, value in (objects or {}).items():
            self.set_object(key, value)

    # ------------------------------------------------------------ configuration
    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            return {
                "conflict_rate": self.conflict_rate,
                "error_rate": self.error_rate,
                "latency_ms": self.latency_ms,
                "drop_rate": self.drop_rate,
                "commit_drop_rate": self.commit_drop_rate,
                "seed": self.seed,
                "objects": dict(self.objects),
                "injected": dict(self.injected),
            }

    def update(self, data: dict[str, Any]) -> None:
        """Apply the given knobs; keys left out keep their value. A seed restarts the sequence."""
        unknown = set(data) - set(_FIELDS) - {"objects", "injected"}
        if unknown:
            raise ValueError(f"unknown fault knobs: {', '.join(sorted(unknown))}")
        rates = {k: data[k] for k in _RATES if k in data}
        for key, value in rates.items():
            if not isinstance(value, int | float) or not 0 <= value <= 1:
                raise ValueError(f"{key} must be a number between 0 and 1")
        if "latency_ms" in data and (
            not isinstance(data["latency_ms"], int | float) or data["latency_ms"] < 0
        ):
            raise ValueError("latency_ms must be a non-negative number")
        objects = data.get("objects")
        if objects is not None and (
            not isinstance(objects, dict) or any(v not in OBJECT_FAULTS for v in objects.values())
        ):
            raise ValueError(f"objects must map '<kind>/<namespace>/<name>' to one of {OBJECT_FAULTS}")
        with self._lock:
            for key, value in rates.items():
                setattr(self, key, float(value))
            if "latency_ms" in data:
                self.latency_ms = int(data["latency_ms"])
            if objects is not None:
                self.objects = {_norm_key(k): v for k, v in objects.items()}
            if "seed" in data:
                self.seed = data["seed"]
                self._rng = random.Random(self.seed)
                self._next_error = 500
            if any(rates.values()) or data.get("latency_ms"):
                self.armed += 1

    def reset(self) -> None:
        self.update(
            {
                "conflict_rate": 0,
                "error_rate": 0,
                "latency_ms": 0,
                "drop_rate": 0,
                "commit_drop_rate": 0,
                "objects": {},
                "seed": None,
            }
        )
        with self._lock:
            self.injected = {"conflict": 0, "error": 0, "drop": 0, "commit_drop": 0}

    def set_object(self, key: str, fault: str | None) -> None:
        """Set or clear (fault None) the fault of one object, key "<kind>/<namespace>/<name>"."""
        if fault is not None and fault not in OBJECT_FAULTS:
            raise ValueError(f"object fault must be one of {OBJECT_FAULTS}")
        with self._lock:
            if fault is None:
                self.objects.pop(_norm_key(key), None)
            else:
                self.objects[_norm_key(key)] = fault

    # --------------------------------------------------------------- decisions
    def object_fault(self, kind: str, namespace: str | None, name: str) -> str | None:
        if not self.objects:
            return None
        return self.objects.get(_norm_key(f"{kind}/{namespace or ''}/{name}"))

    def _roll(self, rate: float, counter: str | None) -> bool:
        if rate <= 0:
            return False
        with self._lock:
            hit = self._rng.random() < rate
            if hit and counter:
                self.injected[counter] += 1
            return hit

    def count(self, counter: str) -> None:
        """Count a fault the server injected after the roll (a reply lost after its commit)."""
        with self._lock:
            self.injected[counter] += 1

    def should_drop(self) -> bool:
        return self._roll(self.drop_rate, "drop")

    def should_commit_drop(self) -> bool:
        """Apply this mutating request, then close the connection instead of answering.

        Counted by the server when it drops the answer: a write the store refuses is answered.
        """
        return self._roll(self.commit_drop_rate, None)

    def should_conflict(self) -> bool:
        return self._roll(self.conflict_rate, "conflict")

    def error_code(self) -> int | None:
        """500 or 503 (alternating) when an error is injected for this request."""
        if not self._roll(self.error_rate, "error"):
            return None
        with self._lock:
            code = self._next_error
            self._next_error = 503 if code == 500 else 500
            return code


def _norm_key(key: str) -> str:
    kind, _, rest = key.partition("/")
    return f"{kind.lower()}/{rest}"
