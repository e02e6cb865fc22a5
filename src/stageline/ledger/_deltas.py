"""Channel values of checkpoints: each stored once per version, a growing list as what it appended.

LangGraph hands the saver a checkpoint holding every channel's value and says which channels
moved (``new_versions``). Only those are written, one row per channel and version in
``checkpoint_blobs``; the checkpoint row keeps the versions alone. A list that grew (by a
reducer such as ``operator.add``: its first items are the very items this saver stored for the
channel at the parent checkpoint) is written as a *delta*: the items appended and the version
they extend. So a step stores what it changed, and bytes per step do not grow with the run.

A read follows base versions down to a whole value, in one recursive query. Deltas are merged
like the digits of a counter in base ``FANOUT``, so that chain stays short: when ``FANOUT``
deltas of one level stand on top of each other, the next delta skips them (its base is the
entry below them) and carries their items as well. A read then follows at most
``1 + (FANOUT - 1) * levels`` rows, and an item is written once per level (levels grow with the
logarithm of the run's length: 2 for a run of 1,000 steps).

A saver knows what it stored last only in its own process (a bounded cache per thread): a delta
is written only when the checkpoint's parent is the checkpoint this saver wrote last on that
thread, and the list starts with the very objects stored then (identity, not equality:
``1 == True``, but they serialize differently). Anything else (a list that shrank or was
replaced, a fork, a restart, a thread written by another process) is stored whole. As with
LangGraph's own ``DeltaChannel``, an item changed in place after it was stored (mutated, not
replaced) goes unnoticed; LangGraph's reducers never do that.

A delta whose base is missing or does not decode is ``CheckpointCorrupt`` (through the
caller's ``corrupt``), never a shorter list. Rows are inserted, never replaced (a version's
value never changes, so no chain can loop), and a thread's rows are deleted together: no delete
leaves a delta without its base.
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ormsgpack
from sqlalchemy import and_, bindparam, delete, select
from sqlalchemy.sql import ClauseElement

from stageline.ledger._schema import checkpoint_blobs

if TYPE_CHECKING:  # show reads checkpoints without importing LangGraph
    from langgraph.checkpoint.serde.base import SerializerProtocol

__all__ = [
    "DELETE_THREAD",
    "DELTA",
    "EMPTY",
    "FANOUT",
    "ChannelValues",
    "chain_query",
    "insert_statement",
    "missing_values",
    "rebuild",
]

DELTA = "stageline-delta"
"""The type of a row holding items appended to the list at its ``base_version``."""
EMPTY = "empty"
"""The type of a row for a channel that has a version but no value (as LangGraph's savers)."""
FANOUT = 32
"""Deltas of one level that are merged into one of the next level."""
CACHED_THREADS = 128
"""Threads (and namespaces) whose last stored lists a saver keeps in memory."""

_b = checkpoint_blobs.c
_WHOLE = -1  # the level of a value stored whole: the bottom of a chain, never merged

DELETE_THREAD = delete(checkpoint_blobs).where(_b.thread_id == bindparam("thread_id"))

Decode = Callable[[str, bytes, str], Any]
"""``(type, blob, what)``: a stored value, or the caller's typed error naming ``what``."""
Corrupt = Callable[[str], Exception]


@dataclass(frozen=True)
class _Spine:
    """The chain under the list a saver stored last for one channel."""

    items: tuple[Any, ...]
    """The items stored at the top entry's version (the objects themselves)."""
    entries: tuple[tuple[str, int, int], ...]
    """(version, length, level) from the whole value at the bottom to the top."""


@dataclass(frozen=True)
class _Thread:
    checkpoint_id: str
    spines: dict[str, _Spine]


def _plan(spine: _Spine | None, value: list[Any], version: str) -> _Spine | None:
    """The chain if ``value`` extends ``spine``'s list (its top is then the delta to write)."""
    if spine is None or len(value) < len(spine.items):
        return None
    if any(e[0] == version for e in spine.entries):
        return None  # a version is written once: never a delta on itself
    if not all(map(operator.is_, spine.items, value)):
        return None
    entries = [*spine.entries, (version, len(value), 0)]
    level = 0
    while len(entries) > FANOUT and all(e[2] == level for e in entries[-FANOUT:]):
        level += 1
        entries[-FANOUT:] = [(version, len(value), level)]
    return _Spine(tuple(value), tuple(entries))


class ChannelValues:
    """Encodes a checkpoint's new channel values into rows, and reads them back."""

    def __init__(self, serde: SerializerProtocol) -> None:
        self._serde = serde
        self._threads: OrderedDict[tuple[str, str], _Thread] = OrderedDict()

    def encode(
        self,
        run_id: str,
        ns: str,
        parent_id: str | None,
        checkpoint: Mapping[str, Any],
        new_versions: Mapping[str, Any],
    ) -> tuple[dict[str, Any], list[dict[str, Any]], Callable[[], None]]:
        """The checkpoint without its values, the value rows to insert with it, and what to
        call once they are committed (then the next step may extend them)."""
        key = (run_id, ns)
        known = self._threads.get(key)
        spines = known.spines if known and parent_id and known.checkpoint_id == parent_id else {}
        after = dict(spines)
        values = checkpoint["channel_values"]
        rows = []
        for channel, raw_version in new_versions.items():
            version = str(raw_version)
            row: dict[str, Any] = {"thread_id": run_id, "checkpoint_ns": ns, "channel": channel}
            row |= {"version": version, "base_version": None}
            after.pop(channel, None)
            if channel not in values:
                rows.append({**row, "type": EMPTY, "blob": b""})
                continue
            value = values[channel]
            if type(value) is list:
                spine = _plan(spines.get(channel), value, version)
                if spine is not None:
                    base, base_len, _ = spine.entries[-2]
                    kind, blob = self._serde.dumps_typed(value[base_len:])
                    packed = ormsgpack.packb([kind, base_len, blob])
                    rows.append({**row, "type": DELTA, "blob": packed, "base_version": base})
                    after[channel] = spine
                    continue
                after[channel] = _Spine(tuple(value), ((version, len(value), _WHOLE),))
            kind, blob = self._serde.dumps_typed(value)
            rows.append({**row, "type": kind, "blob": blob})

        def remember() -> None:
            self._threads[key] = _Thread(str(checkpoint["id"]), after)
            self._threads.move_to_end(key)
            while len(self._threads) > CACHED_THREADS:
                self._threads.popitem(last=False)

        return {**checkpoint, "channel_values": {}}, rows, remember

    def forget(self, run_id: str) -> None:
        """The thread's rows are gone: never extend them again."""
        for key in [k for k in self._threads if k[0] == run_id]:
            del self._threads[key]


def missing_values(checkpoint: Mapping[str, Any]) -> dict[str, str]:
    """The channels with a version whose value is not in the checkpoint row: channel to version."""
    values = checkpoint["channel_values"]
    return {
        ch: str(version)
        for ch, version in checkpoint["channel_versions"].items()
        if ch not in values
    }


_CHAINS: dict[int, ClauseElement] = {}
"""``chain_query``'s statement for each number of channels, built once (the ledger caches each
compiled statement by identity)."""


def chain_query(
    run_id: str, ns: str, wanted: Mapping[str, str]
) -> tuple[ClauseElement, dict[str, Any]]:
    """The rows of the wanted (channel: version) values and every row their deltas extend, in
    one recursive query: the statement and its parameters. It asks for each wanted channel at
    each wanted version (index look-ups, not a scan of the thread's rows); ``rebuild`` takes
    the pairs it wants."""
    count = len(wanted)
    if (stmt := _CHAINS.get(count)) is None:
        stmt = _CHAINS[count] = _chain_statement(count)
    params: dict[str, Any] = {"thread_id": run_id, "ns": ns}
    for i, (channel, version) in enumerate(wanted.items()):
        params[f"c{i}"], params[f"v{i}"] = channel, version
    return stmt, params


def _chain_statement(count: int) -> ClauseElement:
    thread = and_(_b.thread_id == bindparam("thread_id"), _b.checkpoint_ns == bindparam("ns"))
    chain = (
        select(_b.channel, _b.version, _b.base_version)
        .where(
            thread,
            _b.channel.in_([bindparam(f"c{i}") for i in range(count)]),
            _b.version.in_([bindparam(f"v{i}") for i in range(count)]),
        )
        .cte("chain", recursive=True)
    )
    below = select(_b.channel, _b.version, _b.base_version).join(
        chain, and_(thread, _b.channel == chain.c.channel, _b.version == chain.c.base_version)
    )
    chain = chain.union(below)
    return select(_b.channel, _b.version, _b.type, _b.blob, _b.base_version).join(
        chain, and_(thread, _b.channel == chain.c.channel, _b.version == chain.c.version)
    )


def rebuild(
    rows: list[dict[str, Any]], wanted: Mapping[str, str], decode: Decode, corrupt: Corrupt
) -> dict[str, Any]:
    """The wanted channels' values from ``chain_query``'s rows. A channel without a row, or
    with an ``empty`` one, has no value (as in LangGraph's savers)."""
    found = {(r["channel"], r["version"]): r for r in rows}
    values: dict[str, Any] = {}
    for channel, version in wanted.items():
        row = found.get((channel, version))
        if row is not None and row["type"] != EMPTY:
            values[channel] = _value(channel, row, found, decode, corrupt)
    return values


def _value(
    channel: str,
    row: dict[str, Any],
    found: Mapping[tuple[str, str], dict[str, Any]],
    decode: Decode,
    corrupt: Corrupt,
) -> Any:
    deltas: list[dict[str, Any]] = []
    while row["type"] == DELTA:
        if len(deltas) > len(found):
            raise corrupt(f"the deltas of channel {channel!r} go round in a loop")
        deltas.append(row)
        base = found.get((channel, row["base_version"]))
        if base is None:
            raise corrupt(
                f"channel {channel!r} at version {row['version']} extends version "
                f"{row['base_version']}, which is not stored"
            )
        row = base
    what = f"channel {channel!r} at version {row['version']}"
    value = decode(row["type"], bytes(row["blob"]), what)
    if deltas and type(value) is not list:
        raise corrupt(f"{what} is extended by a delta but holds a {type(value).__name__}")
    for delta in reversed(deltas):
        what = f"channel {channel!r} at version {delta['version']} ({DELTA})"
        kind, base_len, blob = _unpack(delta["blob"], what, corrupt)
        if base_len != len(value):
            raise corrupt(f"{what} extends {base_len} items, but its base holds {len(value)}")
        items = decode(kind, blob, what)
        if type(items) is not list:
            raise corrupt(f"{what} appends a {type(items).__name__}, not a list")
        value.extend(items)
    return value


def _unpack(blob: Any, what: str, corrupt: Corrupt) -> tuple[str, int, bytes]:
    try:
        kind, base_len, payload = ormsgpack.unpackb(bytes(blob))
    except Exception as exc:
        raise corrupt(f"{what} does not decode ({type(exc).__name__})") from exc
    if not (isinstance(kind, str) and type(base_len) is int and isinstance(payload, bytes)):
        raise corrupt(f"{what} is not a delta stageline writes")
    return kind, base_len, payload


def insert_statement(upsert: Callable[[Any], Any]) -> ClauseElement:
    """Insert value rows, keeping a row already there (a version's value never changes)."""
    stmt: ClauseElement = upsert(checkpoint_blobs).on_conflict_do_nothing()
    return stmt
