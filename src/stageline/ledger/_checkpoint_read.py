"""A run's latest checkpoint, read straight from the checkpoint tables (``_saver`` writes them,
its channel values as ``_deltas`` stores them).

``show`` needs a run's state and the pending writes a waiting run's trust check reads; opening
the saver for that costs about a second of LangGraph's imports. This reader decodes the rows
itself, and only what it can decode exactly as LangGraph would: plain msgpack values and a
short list of standard-library types (all on LangGraph's own safe list), plus the interrupts
of pending writes. Anything else (another serialization type, another type in a blob, a
blob that does not decode, a delta channel) is ``Unsure``: the caller then reads the
checkpoint through LangGraph, which decides (and refuses what is off the allowlist) as ever.
"""

from __future__ import annotations

import collections
import datetime
import decimal
import pathlib
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import ormsgpack
from sqlalchemy import bindparam, select

from stageline.ledger._base import LedgerStore
from stageline.ledger._deltas import chain_query, missing_values, rebuild
from stageline.ledger._schema import checkpoint_writes, checkpoints
from stageline.ledger._sql_statements import latest_checkpoint_id

__all__ = ["SavedCheckpoint", "SavedInterrupt", "Unsure", "is_state_channel", "latest_checkpoint"]


def is_state_channel(channel: str) -> bool:
    """A state key, not one of LangGraph's own channels (``branch:to:x``, ``__start__``)."""
    return ":" not in channel and not channel.startswith("__")


class Unsure(Exception):
    """This reader cannot vouch for the checkpoint: read it through LangGraph instead."""


@dataclass(frozen=True)
class SavedInterrupt:
    """A pending interrupt as LangGraph stored it (``langgraph.types.Interrupt``)."""

    value: Any
    id: str


@dataclass(frozen=True)
class SavedCheckpoint:
    channel_values: dict[str, Any]
    writes: list[tuple[str, str, Any]]
    """Pending writes: (task id, channel, value)."""


_PLAIN: dict[tuple[str, str], Callable[..., Any]] = {
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("collections", "deque"): collections.deque,
    ("datetime", "datetime"): datetime.datetime,
    ("datetime", "date"): datetime.date,
    ("datetime", "time"): datetime.time,
    ("datetime", "timedelta"): datetime.timedelta,
    ("datetime", "timezone"): datetime.timezone,
    ("uuid", "UUID"): uuid.UUID,
    ("decimal", "Decimal"): decimal.Decimal,
    ("pathlib", "Path"): pathlib.Path,
    ("pathlib", "PosixPath"): pathlib.PosixPath,
}
"""Types revived here, each by its constructor as LangGraph's ext hook does (all are on
LangGraph's safe list); any other type named in a blob leaves the decision to LangGraph."""
_METHODS = {
    ("datetime", "datetime", "fromisoformat"): datetime.datetime.fromisoformat,
    ("datetime", "date", "fromisoformat"): datetime.date.fromisoformat,
    ("datetime", "time", "fromisoformat"): datetime.time.fromisoformat,
}
_SINGLE, _POS, _KW, _METHOD = 0, 1, 2, 3  # LangGraph's ext codes (jsonplus.py)
_INTERRUPT = ("langgraph.types", "Interrupt")


def _unpack(data: bytes) -> Any:
    return ormsgpack.unpackb(data, ext_hook=_ext, option=ormsgpack.OPT_NON_STR_KEYS)


def _ext(code: int, data: bytes) -> Any:
    try:
        args = _unpack(data)
    except Unsure:
        raise
    except Exception as exc:
        raise Unsure(f"an ext value does not decode ({type(exc).__name__})") from exc
    if not isinstance(args, list | tuple) or len(args) < 3:
        raise Unsure(f"ext type {code} is not a LangGraph constructor")
    key = (args[0], args[1])
    if code == _KW and key == _INTERRUPT and isinstance(args[2], dict):
        fields = args[2]
        if set(fields) - {"value", "id", "response_schema"} or "id" not in fields:
            raise Unsure("an interrupt with fields LangGraph does not write")
        return SavedInterrupt(fields.get("value"), str(fields["id"]))
    if code == _METHOD and len(args) == 4 and (*key, args[3]) in _METHODS:
        return _METHODS[(*key, args[3])](args[2])
    make = _PLAIN.get(key)
    if make is None:
        raise Unsure(f"type {args[0]}.{args[1]} is for LangGraph to judge")
    if code == _SINGLE:
        return make(args[2])
    if code == _POS:
        return make(*args[2])
    if code == _KW:
        return make(**args[2])
    raise Unsure(f"ext type {code} is for LangGraph to judge")


def decode(kind: str | None, blob: bytes | None) -> Any:
    """A value as LangGraph's serializer would read it back, or ``Unsure``."""
    if kind == "null":
        return None
    if kind in ("bytes", "bytearray") and blob is not None:
        return bytes(blob) if kind == "bytes" else bytearray(blob)
    if kind != "msgpack" or blob is None:
        raise Unsure(f"a value stored as {kind!r}")
    try:
        return _unpack(bytes(blob))
    except Unsure:
        raise
    except Exception as exc:
        raise Unsure(f"a msgpack value does not decode ({type(exc).__name__})") from exc


_LATEST = select(checkpoints.c.checkpoint_id, checkpoints.c.type, checkpoints.c.checkpoint).where(
    checkpoints.c.thread_id == bindparam("run"),
    checkpoints.c.checkpoint_ns == bindparam("ns"),
    checkpoints.c.checkpoint_id
    == latest_checkpoint_id(bindparam("run"), bindparam("ns")).scalar_subquery(),
)
_WRITES = (
    select(
        checkpoint_writes.c.task_id,
        checkpoint_writes.c.channel,
        checkpoint_writes.c.type,
        checkpoint_writes.c.value,
    )
    .where(
        checkpoint_writes.c.thread_id == bindparam("run"),
        checkpoint_writes.c.checkpoint_ns == bindparam("ns"),
        checkpoint_writes.c.checkpoint_id == bindparam("cp"),
    )
    .order_by(checkpoint_writes.c.task_path, checkpoint_writes.c.task_id, checkpoint_writes.c.idx)
)


async def latest_checkpoint(ledger: LedgerStore, run_id: str) -> SavedCheckpoint | None:
    """The run's latest checkpoint (None: it has none); ``Unsure`` when LangGraph must judge."""
    from stageline.ledger._sql import SqlLedger

    if not isinstance(ledger, SqlLedger):
        raise Unsure("not a SQL ledger")
    async with ledger._read() as x:
        rows = await x.fetch(ledger._sql(_LATEST), {"run": run_id, "ns": ""})
        if not rows:
            return None
        row = rows[0]
        checkpoint = decode(row["type"], row["checkpoint"])
        values = checkpoint.get("channel_values") if isinstance(checkpoint, Mapping) else None
        if not isinstance(values, dict):
            raise Unsure("a checkpoint without channel values")
        versions = checkpoint.get("channel_versions")
        if not isinstance(versions, Mapping):
            raise Unsure("a checkpoint without channel versions")
        if wanted := missing_values(checkpoint):
            stmt, params = chain_query(run_id, "", wanted)
            stored = await x.fetch(ledger._sql(stmt), params)
            values |= rebuild(stored, wanted, lambda kind, blob, _: decode(kind, blob), Unsure)
        if missing := [k for k in versions if k not in values and is_state_channel(k)]:
            # a delta channel: LangGraph replays its writes
            raise Unsure(f"channel {missing[0]!r} has a version but no value")
        found = await x.fetch(
            ledger._sql(_WRITES), {"run": run_id, "ns": "", "cp": row["checkpoint_id"]}
        )
    writes = [(w["task_id"], w["channel"], decode(w["type"], w["value"])) for w in found]
    return SavedCheckpoint(channel_values=values, writes=writes)
