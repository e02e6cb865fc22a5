"""Checkpoint serialization with an explicit allowlist: nothing else is ever revived."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

__all__ = ["STAGELINE_TYPES", "checkpoint_serde", "ensure_checkpointable"]

STAGELINE_TYPES: tuple[tuple[str, str], ...] = ()
"""stageline's own types that travel in checkpoints (interrupt payloads are plain dicts)."""


def _key(t: type[Any] | tuple[str, str]) -> tuple[str, str]:
    return t if isinstance(t, tuple) else (t.__module__, t.__qualname__)


def checkpoint_serde(extra: Iterable[type[Any] | tuple[str, str]] = ()) -> JsonPlusSerializer:
    """LangGraph's serializer, restricted to stageline's types plus ``extra``.

    LangGraph's permissive default (revive any type named in a blob) is never used: a
    checkpoint naming a type outside the allowlist is refused.
    """
    allowed = sorted({*STAGELINE_TYPES, *(_key(t) for t in extra)})
    return JsonPlusSerializer(allowed_msgpack_modules=allowed, allowed_json_modules=None)


def ensure_checkpointable(serde: JsonPlusSerializer, value: Any) -> str | None:
    """None if ``value`` survives a checkpoint round trip, else why not."""
    try:
        kind, blob = serde.dumps_typed(value)
    except Exception as exc:  # the serializer raises TypeError, ValueError, ormsgpack errors
        return f"{type(value).__name__} cannot be serialized ({exc})"
    try:
        back = serde.loads_typed((kind, blob))
    except Exception as exc:
        return f"{type(value).__name__} cannot be read back ({exc})"
    return _changed(value, back, "")


def _changed(value: Any, back: Any, where: str) -> str | None:
    """Why ``back`` is not ``value`` read back (types, down through dicts and lists), or None."""
    if type(back) is not type(value) and not (isinstance(value, tuple) and isinstance(back, list)):
        at = f" at {where}" if where else ""
        return (
            f"{type(value).__name__}{at} is not on the checkpoint allowlist "
            f"(read back as {type(back).__name__})"
        )
    if isinstance(value, dict):
        for key, item in value.items():
            why = _changed(item, back.get(key), f"{where}[{key!r}]")
            if why:
                return why
    elif isinstance(value, list | tuple):
        for i, (item, again) in enumerate(zip(value, back, strict=False)):
            why = _changed(item, again, f"{where}[{i}]")
            if why:
                return why
    return None
