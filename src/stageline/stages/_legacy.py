"""Adapter from legacy stage objects with ``execute(context) -> dict``."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping
from typing import Any

from stageline.stages._context import StageContext
from stageline.stages._stage import Stage

__all__ = ["legacy_stage"]


def legacy_stage(obj: Any, *, name: str | None = None, **options: Any) -> Stage:
    """Turn an object with ``execute(context) -> dict`` (sync or async) into a stage.

    The legacy context dict is the state with the run's services merged back in, so old code
    that reads ``context["database_service"]`` keeps working; service keys are dropped from
    what it returns, so nothing live reaches a checkpoint.
    """
    execute = obj.execute
    label = name or getattr(obj, "name", None) or type(obj).__name__

    async def run(state: Mapping[str, Any], ctx: StageContext) -> dict[str, Any]:
        context: dict[str, Any] = {**dict(state), **dict(ctx.services)}
        context.setdefault("run_id", ctx.run_id)
        if inspect.iscoroutinefunction(execute):
            result = await execute(context)
        else:
            result = await asyncio.to_thread(execute, context)
            if inspect.isawaitable(result):
                result = await result
        if result is None:
            return {}
        if not isinstance(result, Mapping):
            raise TypeError(f"legacy stage {label} returned {type(result).__name__}, not a dict")
        return {k: v for k, v in result.items() if k not in ctx.services and k != "run_id"}

    run.__qualname__ = run.__name__ = f"legacy[{label}]"
    made = Stage(fn=run, name=label)
    return made.with_options(**options) if options else made
