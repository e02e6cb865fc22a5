"""Declaring stages and finding them by name: the ``@stage`` decorator and the stage registry."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, overload

from langgraph.types import RetryPolicy

from stageline.errors import StageNotFound
from stageline.stages._legacy import legacy_stage
from stageline.stages._stage import Stage, StageFn, _retry_policy, _timeout

__all__ = ["lookup_stage", "register_stage", "registered_stages", "stage"]

_REGISTRY: dict[str, Stage] = {}


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
    reads: tuple[str, ...] | list[str] | None = None,
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
    reads: tuple[str, ...] | list[str] | None = None,
    register: bool = True,
) -> Stage | Callable[[StageFn], Stage]:
    """Declare a stage. Retry maps to LangGraph's ``RetryPolicy``, timeout to its node timeout.

    ``name`` registers the stage so YAML templates can name it; without one the stage is
    registered as ``module:function``. ``writes`` and ``reads`` declare the state keys it
    writes and reads (the catalog infers them where not declared); a stage that declares
    ``writes`` and returns another key fails its node.
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
            reads=tuple(reads) if reads is not None else None,
        )
        if register:
            register_stage(made)
        return made

    return wrap(fn) if fn is not None else wrap


def register_stage(made: Stage, *, alias: str | None = None) -> Stage:
    """Make a stage findable by name from YAML templates."""
    _REGISTRY[alias or made.name] = made
    return made


def registered_stages() -> dict[str, Stage]:
    """Every stage registered by name so far (a copy), by name."""
    return dict(_REGISTRY)


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
        return legacy_stage(target, name=ref)
    if callable(target):
        return Stage(fn=target, name=ref)
    raise StageNotFound(f"{ref!r} is not a stage, a function or an object with execute()")
