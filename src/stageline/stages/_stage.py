"""The ``@stage`` decorator, stage metadata and the stage registry."""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeAlias, overload

from langgraph.types import RetryPolicy

from stageline.errors import StageNotFound, UsageError
from stageline.stages._context import StageContext

__all__ = ["Stage", "StageFn", "lookup_stage", "register_stage", "stage"]

StageFn: TypeAlias = Callable[
    [Any, StageContext], "Mapping[str, Any] | Awaitable[Mapping[str, Any]] | None"
]

_REGISTRY: dict[str, Stage] = {}


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
    """The state keys the stage writes, where declared; used to check fan-in reducers."""
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
            "metadata": self.metadata,
        }
        if "retry" in changes:
            changes["retry"] = _retry_policy(changes["retry"])
        if "timeout" in changes:
            changes["timeout"] = _timeout(changes["timeout"])
        if "writes" in changes and changes["writes"] is not None:
            changes["writes"] = tuple(changes["writes"])
        fields.update(changes)
        return Stage(**fields)


@overload
def stage(fn: StageFn, /) -> Stage: ...


@overload
def stage(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    capability: str | None = None,
    cost_class: str | None = None,
    retry: int | RetryPolicy | Mapping[str, Any] | None = None,
    timeout: float | timedelta | None = None,
    writes: tuple[str, ...] | list[str] | None = None,
    register: bool = True,
) -> Callable[[StageFn], Stage]: ...


def stage(
    fn: StageFn | None = None,
    /,
    *,
    name: str | None = None,
    capability: str | None = None,
    cost_class: str | None = None,
    retry: int | RetryPolicy | Mapping[str, Any] | None = None,
    timeout: float | timedelta | None = None,
    writes: tuple[str, ...] | list[str] | None = None,
    register: bool = True,
) -> Stage | Callable[[StageFn], Stage]:
    """Declare a stage. Retry maps to LangGraph's ``RetryPolicy``, timeout to its node timeout.

    ``name`` registers the stage so YAML templates can name it; without one the stage is
    registered as ``module:function``.
    """

    def wrap(func: StageFn) -> Stage:
        qualified = f"{func.__module__}:{func.__qualname__}"
        made = Stage(
            fn=func,
            name=name or qualified,
            capability=capability,
            cost_class=cost_class,
            retry=_retry_policy(retry),
            timeout=_timeout(timeout),
            writes=tuple(writes) if writes is not None else None,
        )
        if register:
            register_stage(made)
        return made

    return wrap(fn) if fn is not None else wrap


def register_stage(made: Stage, *, alias: str | None = None) -> Stage:
    """Make a stage findable by name from YAML templates."""
    _REGISTRY[alias or made.name] = made
    return made


def lookup_stage(ref: str) -> Stage:
    """A stage by registered name, or by import path ``pkg.module:attr`` / ``pkg.module.attr``."""
    if ref in _REGISTRY:
        return _REGISTRY[ref]
    module_name, sep, attr = ref.partition(":")
    if not sep:
        module_name, _, attr = ref.rpartition(".")
    if not module_name or not attr:
        raise StageNotFound(f"unknown stage {ref!r}: not registered and not an import path")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise StageNotFound(
            f"unknown stage {ref!r}: cannot import {module_name!r} ({exc})"
        ) from exc
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise StageNotFound(f"unknown stage {ref!r}: {module_name} has no {attr!r}")
    if isinstance(target, Stage):
        return target
    if hasattr(target, "execute"):
        from stageline.stages._legacy import legacy_stage

        return legacy_stage(target, name=ref)
    if callable(target):
        return Stage(fn=target, name=ref)
    raise StageNotFound(f"{ref!r} is not a stage, a function or an object with execute()")
