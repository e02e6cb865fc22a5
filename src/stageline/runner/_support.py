"""What the runner shares between its modules: the run summary and small helpers."""

from __future__ import annotations

import typing
import uuid
from collections.abc import Mapping
from typing import Any

from langgraph.errors import InvalidUpdateError, NodeTimeoutError

from stageline.errors import LeaseHeld
from stageline.runner._summary import RunSummary
from stageline.statekeys import RESERVED_KEYS

__all__ = ["RECURSION_LIMIT", "RunSummary", "new_run_id"]

RECURSION_LIMIT = 10_000
"""Declared loop bounds stop cycles; LangGraph's step limit only backs them up."""


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def _config(run_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": run_id}, "recursion_limit": RECURSION_LIMIT}


def _public_state(values: Any) -> dict[str, Any]:
    data = dict(values) if isinstance(values, Mapping) else dict(getattr(values, "__dict__", {}))
    for key in RESERVED_KEYS:
        data.pop(key, None)
    return data


def _schema_keys(schema: type[Any]) -> set[str]:
    try:
        return set(typing.get_type_hints(schema))
    except Exception:
        return set(getattr(schema, "__annotations__", {}))


def _stable_ref(ref: str) -> str:
    """A template reference that still resolves from another working directory."""
    from pathlib import Path

    path = Path(ref)
    if path.suffix in (".py", ".yaml", ".yml") and path.exists():
        return str(path.resolve())
    return ref


def _describe_failure(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, InvalidUpdateError):
        return (
            f"parallel stages wrote one state key that has no reducer: {exc}".splitlines()[0],
            "fan_in",
        )
    if isinstance(exc, NodeTimeoutError):
        return f"NodeTimeoutError: {exc}", "timeout"
    if isinstance(exc, LeaseHeld):
        return str(exc), "internal_error"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}", getattr(exc, "failure_phase", "internal_error")
