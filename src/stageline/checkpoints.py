"""Checkpoint serialization with an explicit allowlist: nothing else is ever revived."""

from __future__ import annotations

import contextvars
import copy
from collections.abc import Iterable
from typing import Any

from langgraph.checkpoint.serde.event_hooks import SerdeEvent, register_serde_event_listener
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from stageline.errors import CheckpointCorrupt

__all__ = ["STAGELINE_TYPES", "StrictSerializer", "checkpoint_serde", "ensure_checkpointable"]

WRITTEN_TYPES = frozenset({"msgpack", "null", "bytes", "bytearray"})
"""The serialization types stageline writes; a value stored as any other (pickle, json) was
put there by someone else."""

_refused: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "stageline_refused_types", default=None
)
_listening: list[bool] = []


def _on_serde_event(event: SerdeEvent) -> None:
    refused = _refused.get()
    if refused is not None and event.get("kind", "").endswith("blocked"):
        name = f"{event.get('module')}.{event.get('name')}"
        refused.append(f"{name}.{event['method']}" if "method" in event else name)


class StrictSerializer(JsonPlusSerializer):
    """LangGraph's serializer, but a value that is not exactly what stageline writes is an
    error (``CheckpointCorrupt``), never revived as its raw arguments: a type off the
    allowlist, a pickle or any other foreign serialization type, a blob that does not decode."""

    strict = True

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        if not self.strict:
            return super().loads_typed(data)
        kind, blob = data
        if kind not in WRITTEN_TYPES:
            raise CheckpointCorrupt(f"a value is stored as {kind!r}, which stageline never writes")
        if not _listening:  # LangGraph reports each type its allowlist blocks
            register_serde_event_listener(_on_serde_event)
            _listening.append(True)
        refused: list[str] = []
        token = _refused.set(refused)
        try:
            value = super().loads_typed(data)
        except CheckpointCorrupt:
            raise
        except Exception as exc:
            raise CheckpointCorrupt(
                f"a {kind} value of {len(blob or b'')} bytes does not decode ({type(exc).__name__})"
            ) from exc
        finally:
            _refused.reset(token)
        if refused:
            raise CheckpointCorrupt(
                f"a value names type {refused[0]}, which is not on the checkpoint allowlist"
            )
        return value

    def lenient(self) -> JsonPlusSerializer:
        """A copy that reads a blocked type back as its raw data (to say what went wrong)."""
        clone = copy.copy(self)
        clone.strict = False
        return clone


STAGELINE_TYPES: tuple[tuple[str, str], ...] = ()
"""stageline's own types that travel in checkpoints (interrupt payloads are plain dicts)."""


def _key(t: type[Any] | tuple[str, str]) -> tuple[str, str]:
    return t if isinstance(t, tuple) else (t.__module__, t.__qualname__)


def checkpoint_serde(extra: Iterable[type[Any] | tuple[str, str]] = ()) -> StrictSerializer:
    """LangGraph's serializer, restricted to stageline's types plus ``extra``.

    LangGraph's permissive default (revive any type named in a blob) is never used: a
    checkpoint naming a type outside the allowlist is refused (``CheckpointCorrupt``).
    """
    allowed = sorted({*STAGELINE_TYPES, *(_key(t) for t in extra)})
    return StrictSerializer(allowed_msgpack_modules=allowed, allowed_json_modules=None)


def ensure_checkpointable(serde: JsonPlusSerializer, value: Any) -> str | None:
    """None if ``value`` survives a checkpoint round trip, else why not."""
    try:
        kind, blob = serde.dumps_typed(value)
    except Exception as exc:  # the serializer raises TypeError, ValueError, ormsgpack errors
        return f"{type(value).__name__} cannot be serialized ({exc})"
    reader = serde.lenient() if isinstance(serde, StrictSerializer) else serde
    try:
        back = reader.loads_typed((kind, blob))
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
