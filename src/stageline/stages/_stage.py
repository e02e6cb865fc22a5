"""A stage and its metadata: the callable, capability, cost class, retry policy, timeout."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeAlias

from langgraph.types import RetryPolicy

from stageline.errors import UsageError
from stageline.stages._context import StageContext

__all__ = ["Stage", "StageFn", "_retry_policy", "_timeout"]

StageFn: TypeAlias = Callable[
    [Any, StageContext], "Mapping[str, Any] | Awaitable[Mapping[str, Any]] | None"
]


def _retry_policy(retry: int | RetryPolicy | Mapping[str, Any] | None) -> RetryPolicy | None:
    if retry is None or isinstance(retry, RetryPolicy):
        return retry
    if isinstance(retry, bool):
        raise UsageError("retry takes a number of attempts, a mapping or a RetryPolicy")
    if isinstance(retry, int):
        if retry < 1:
            raise UsageError(f"retry must allow at least 1 attempt, got {retry}")
        return RetryPolicy(max_attempts=retry)
    try:
        return RetryPolicy(**dict(retry))
    except TypeError as exc:
        raise UsageError(f"bad retry policy {dict(retry)!r}: {exc}") from exc


def _timeout(value: float | timedelta | None) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds <= 0:
        raise UsageError(f"timeout must be positive, got {seconds}")
    return seconds


@dataclass(frozen=True, kw_only=True)
class Stage:
    """A stage: an async or sync callable ``(state, ctx) -> partial state`` with metadata."""

    fn: StageFn
    name: str
    capability: str | None = None
    cost_class: str | None = None
    retry: RetryPolicy | None = None
    timeout: float | None = None
    writes: tuple[str, ...] | None = None
    """The state keys the stage writes, where declared: fan-in reducers are checked against
    them, and a node fails if its stage returns a key outside them."""
    reads: tuple[str, ...] | None = None
    """The state keys the stage reads, where declared (the catalog infers them otherwise)."""
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self, state: Any, ctx: StageContext) -> Any:
        return self.fn(state, ctx)

    def with_options(self, **changes: Any) -> Stage:
        """A copy with some options changed (a YAML template may override retry or timeout)."""
        fields: dict[str, Any] = {
            "fn": self.fn,
            "name": self.name,
            "capability": self.capability,
            "cost_class": self.cost_class,
            "retry": self.retry,
            "timeout": self.timeout,
            "writes": self.writes,
            "reads": self.reads,
            "metadata": self.metadata,
        }
        if "retry" in changes:
            changes["retry"] = _retry_policy(changes["retry"])
        if "timeout" in changes:
            changes["timeout"] = _timeout(changes["timeout"])
        for keys in ("writes", "reads"):
            if changes.get(keys) is not None:
                changes[keys] = tuple(changes[keys])
        fields.update(changes)
        return Stage(**fields)
