"""stageline's own checkpoint saver: LangGraph's ``BaseCheckpointSaver`` on the ledger's schema.

One implementation for SQLite and Postgres, over the ledger's executor: a checkpoint is written
in the same transaction as the ledger rows staged for the step (node records, events,
outcomes) and the step's pending writes, with one commit and one round trip
(``SqlLedger.commit_with_staged``). A task's pending writes wait for that commit unless a
sibling still runs (``SqlLedger.commit_writes``); a read flushes any that wait. A value that
does not decode raises ``CheckpointCorrupt`` naming the run, the checkpoint and what was wrong;
it never reads back as ``None``.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from sqlalchemy import (
    Integer,
    LargeBinary,
    Text,
    and_,
    bindparam,
    cast,
    delete,
    literal_column,
    null,
    select,
    union_all,
)
from sqlalchemy.sql import ClauseElement, ColumnElement, CompoundSelect

from stageline.errors import CheckpointCorrupt
from stageline.ledger._deltas import (
    DELETE_THREAD,
    ChannelValues,
    chain_query,
    insert_statement,
    missing_values,
    rebuild,
)
from stageline.ledger._schema import checkpoint_writes, checkpoints
from stageline.ledger._sql import Op, SqlLedger
from stageline.ledger._sql_statements import latest_checkpoint_id

__all__ = ["StagelineSaver"]

_T = TypeVar("_T")

_cp, _w = checkpoints.c, checkpoint_writes.c
_THIS_CHECKPOINT = and_(
    _cp.thread_id == bindparam("thread_id"),
    _cp.checkpoint_ns == bindparam("checkpoint_ns"),
    _cp.checkpoint_id == bindparam("checkpoint_id"),
)
_LATEST_ID = latest_checkpoint_id(
    bindparam("thread_id"), bindparam("checkpoint_ns")
).scalar_subquery()
_SELECT_WRITES = select(_w.task_id, _w.task_path, _w.idx, _w.channel, _w.type, _w.value).where(
    _w.thread_id == bindparam("thread_id"),
    _w.checkpoint_ns == bindparam("checkpoint_ns"),
    _w.checkpoint_id == bindparam("checkpoint_id"),
)


def _with_writes(
    checkpoint: ColumnElement[bool], checkpoint_id: ColumnElement[Any]
) -> CompoundSelect[Any]:
    """The checkpoint ``checkpoint`` selects (``part`` 0) and the pending writes made on it
    (``part`` 1, the value in ``checkpoint``): one query, one round trip, for a read that
    needs both."""
    text, blob = (cast(null(), Text), cast(null(), LargeBinary))
    head = select(
        literal_column("0").label("part"),
        _cp.thread_id,
        _cp.checkpoint_ns,
        _cp.checkpoint_id,
        _cp.parent_checkpoint_id,
        _cp.type,
        _cp.checkpoint,
        _cp.metadata,
        text.label("task_id"),
        text.label("task_path"),
        cast(null(), Integer).label("idx"),
        text.label("channel"),
    ).where(checkpoint)
    writes = select(
        literal_column("1"),
        _w.thread_id,
        _w.checkpoint_ns,
        _w.checkpoint_id,
        text,
        _w.type,
        _w.value,
        blob,
        _w.task_id,
        _w.task_path,
        _w.idx,
        _w.channel,
    ).where(
        _w.thread_id == bindparam("thread_id"),
        _w.checkpoint_ns == bindparam("checkpoint_ns"),
        _w.checkpoint_id == checkpoint_id,
    )
    return union_all(head, writes)


_ONE_WITH_WRITES = _with_writes(_THIS_CHECKPOINT, bindparam("checkpoint_id"))
_LATEST_WITH_WRITES = _with_writes(
    and_(
        _cp.thread_id == bindparam("thread_id"),
        _cp.checkpoint_ns == bindparam("checkpoint_ns"),
        _cp.checkpoint_id == _LATEST_ID,
    ),
    _LATEST_ID,
)
_DELETE_CHECKPOINTS = delete(checkpoints).where(_cp.thread_id == bindparam("thread_id"))
_DELETE_WRITES = delete(checkpoint_writes).where(_w.thread_id == bindparam("thread_id"))


class StagelineSaver(BaseCheckpointSaver[str]):
    """Checkpoints and pending writes in the ledger's database, committed with its rows.

    The async methods are the saver; the sync ones hop to the event loop the saver was opened
    on (call them from another thread, as LangGraph's sync API does).
    """

    def __init__(self, ledger: SqlLedger, *, serde: SerializerProtocol) -> None:
        super().__init__(serde=serde)
        self._ledger = ledger
        self._loop = asyncio.get_running_loop()
        self._statements: dict[str, ClauseElement] = {}
        self._values = ChannelValues(self.serde)

    # -- SQL --------------------------------------------------------------------------------

    def _upsert(self, name: str) -> ClauseElement:
        """The dialect's INSERT ... ON CONFLICT for checkpoints and writes, built once."""
        stmt = self._statements.get(name)
        if stmt is None:
            if name == "checkpoint":
                base = self._ledger._upsert(checkpoints)
                stmt = base.on_conflict_do_update(
                    index_elements=["thread_id", "checkpoint_ns", "checkpoint_id"],
                    set_={
                        c: base.excluded[c]
                        for c in ("parent_checkpoint_id", "type", "checkpoint", "metadata")
                    },
                )
            elif name == "write_replace":
                base = self._ledger._upsert(checkpoint_writes)
                stmt = base.on_conflict_do_update(
                    index_elements=[
                        "thread_id",
                        "checkpoint_ns",
                        "checkpoint_id",
                        "task_id",
                        "idx",
                    ],
                    set_={c: base.excluded[c] for c in ("task_path", "channel", "type", "value")},
                )
            elif name == "values":
                stmt = insert_statement(self._ledger._upsert)
            else:
                stmt = self._ledger._upsert(checkpoint_writes).on_conflict_do_nothing()
            self._statements[name] = stmt
        return stmt

    async def _fetch(self, stmt: ClauseElement, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        if self._ledger.has_staged_writes:  # what this process was told is saved reads back
            await self._ledger.flush()
        async with self._ledger._read() as x:
            return await x.fetch(self._ledger._sql(stmt), params)

    # -- decoding ---------------------------------------------------------------------------

    def _load(self, kind: str, blob: bytes | None, run_id: str, where: str) -> Any:
        try:
            return self.serde.loads_typed((kind, bytes(blob) if blob is not None else b""))
        except CheckpointCorrupt as exc:
            raise CheckpointCorrupt(f"{where}: {exc.detail}", run_id=run_id) from exc
        except Exception as exc:
            raise CheckpointCorrupt(
                f"{where}: a {kind} value of {len(blob or b'')} bytes does not decode "
                f"({type(exc).__name__}: {exc})",
                run_id=run_id,
            ) from exc

    async def _tuple(
        self, row: Mapping[str, Any], writes: list[dict[str, Any]] | None = None
    ) -> CheckpointTuple:
        """The checkpoint of ``row`` with its pending writes (read now unless given, as rows
        with the value in ``checkpoint``)."""
        run_id, ns, cid = row["thread_id"], row["checkpoint_ns"], row["checkpoint_id"]
        metadata = self._load("msgpack", row["metadata"], run_id, f"checkpoint {cid} metadata")
        step = metadata.get("step") if isinstance(metadata, Mapping) else None
        at = f"checkpoint {cid} (step {step})"
        checkpoint = self._load(row["type"], row["checkpoint"], run_id, at)
        if not isinstance(checkpoint, dict) or not all(
            isinstance(checkpoint.get(k), dict) for k in ("channel_values", "channel_versions")
        ):
            raise CheckpointCorrupt(f"{at} is not a checkpoint", run_id=run_id)
        checkpoint["channel_values"] |= await self._channel_values(checkpoint, run_id, ns, at)
        if writes is None:
            writes = [
                {**w, "checkpoint": w["value"]}
                for w in await self._fetch(
                    _SELECT_WRITES,
                    {"thread_id": run_id, "checkpoint_ns": ns, "checkpoint_id": cid},
                )
            ]
        writes.sort(key=lambda w: writes_sort_key(w["task_path"], w["task_id"], w["idx"]))
        pending = [
            (
                w["task_id"],
                w["channel"],
                self._load(w["type"], w["checkpoint"], run_id, f"{at}, write to {w['channel']!r}"),
            )
            for w in writes
        ]
        parent = row["parent_checkpoint_id"]
        return CheckpointTuple(
            config=_config(run_id, ns, cid),
            checkpoint=checkpoint,  # type: ignore[arg-type]
            metadata=metadata,
            parent_config=_config(run_id, ns, parent) if parent else None,
            pending_writes=pending,
        )

    async def _channel_values(
        self, checkpoint: dict[str, Any], run_id: str, ns: str, at: str
    ) -> dict[str, Any]:
        """The values the checkpoint row does not hold, from their rows (see ``_deltas``)."""
        if not (wanted := missing_values(checkpoint)):
            return {}
        stmt, params = chain_query(run_id, ns, wanted)
        rows = await self._fetch(stmt, params)

        def decode(kind: str, blob: bytes, what: str) -> Any:
            return self._load(kind, blob, run_id, f"{at}, {what}")

        def corrupt(detail: str) -> CheckpointCorrupt:
            return CheckpointCorrupt(f"{at}: {detail}", run_id=run_id)

        return rebuild(rows, wanted, decode, corrupt)

    # -- the async saver --------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        params = {"thread_id": conf["thread_id"], "checkpoint_ns": conf.get("checkpoint_ns", "")}
        if checkpoint_id := get_checkpoint_id(config):
            rows = await self._fetch(_ONE_WITH_WRITES, {**params, "checkpoint_id": checkpoint_id})
        elif not params["checkpoint_ns"] and self._ledger.known_unsaved(params["thread_id"]):
            return None  # a run this process just made, or found without one, under its lease
        else:
            rows = await self._fetch(_LATEST_WITH_WRITES, params)
        head = [r for r in rows if r["part"] == 0]
        if not head:
            return None
        return await self._tuple(head[0], [r for r in rows if r["part"] == 1])

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        stmt = select(checkpoints)
        if config:
            conf = config["configurable"]
            stmt = stmt.where(_cp.thread_id == conf["thread_id"])
            if conf.get("checkpoint_ns") is not None:
                stmt = stmt.where(_cp.checkpoint_ns == conf["checkpoint_ns"])
            if checkpoint_id := get_checkpoint_id(config):
                stmt = stmt.where(_cp.checkpoint_id == checkpoint_id)
        if before and (before_id := get_checkpoint_id(before)):
            stmt = stmt.where(_cp.checkpoint_id < before_id)
        stmt = stmt.order_by(_cp.thread_id, _cp.checkpoint_ns, _cp.checkpoint_id.desc())
        if limit is not None and not filter:
            stmt = stmt.limit(max(limit, 0))
        compiled = stmt.compile(dialect=self._ledger._x.dialect)
        if self._ledger.has_staged_writes:
            await self._ledger.flush()
        async with self._ledger._read() as x:
            rows = await x.fetch(str(compiled), compiled.params)
        left = limit
        for row in rows:
            if left is not None and left <= 0:
                return
            if filter:
                metadata = self._load(
                    "msgpack", row["metadata"], row["thread_id"], "a checkpoint's metadata"
                )
                if not all(metadata.get(k) == v for k, v in filter.items()):
                    continue
            if left is not None:
                left -= 1
            yield await self._tuple(row)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = config["configurable"]
        run_id, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        parent = conf.get("checkpoint_id")
        self._ledger.expect_no_checkpoint(run_id, False)
        stored, values, remember = self._values.encode(run_id, ns, parent, checkpoint, new_versions)
        kind, blob = self.serde.dumps_typed(stored)
        _, meta = self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))
        row = {
            "thread_id": run_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint["id"],
            "parent_checkpoint_id": parent,
            "type": kind,
            "checkpoint": blob,
            "metadata": meta,
        }
        ops: list[Op] = [(self._ledger._sql(self._upsert("checkpoint")), [row])]
        if values:
            ops.append((self._ledger._sql(self._upsert("values")), values))
        await self._ledger.commit_with_staged(ops)
        remember()
        return _config(run_id, ns, checkpoint["id"])

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        conf = config["configurable"]
        special = all(channel in WRITES_IDX_MAP for channel, _ in writes)
        rows = []
        for idx, (channel, value) in enumerate(writes):
            kind, blob = self.serde.dumps_typed(value)
            rows.append(
                {
                    "thread_id": conf["thread_id"],
                    "checkpoint_ns": conf.get("checkpoint_ns", ""),
                    "checkpoint_id": conf["checkpoint_id"],
                    "task_id": task_id,
                    "idx": WRITES_IDX_MAP.get(channel, idx),
                    "task_path": task_path,
                    "channel": channel,
                    "type": kind,
                    "value": blob,
                }
            )
        if rows:
            stmt = self._upsert("write_replace" if special else "write_keep")
            # Staged for the step's checkpoint commit, or committed now while a sibling runs.
            await self._ledger.commit_writes([(self._ledger._sql(stmt), rows)], conf["thread_id"])

    async def adelete_thread(self, thread_id: str) -> None:
        params = [{"thread_id": str(thread_id)}]
        ops: list[Op] = [
            (self._ledger._sql(_DELETE_WRITES), params),
            (self._ledger._sql(_DELETE_CHECKPOINTS), params),
            (self._ledger._sql(DELETE_THREAD), params),
        ]
        await self._ledger.commit_with_staged(ops)
        self._values.forget(str(thread_id))

    def get_next_version(self, current: str | None, channel: None) -> str:
        """``NNN...N.RANDOM`` as LangGraph's own savers make them, so that runs they wrote
        (converted by ``db upgrade``) go on with versions that compare alike."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(current.split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- the sync saver: the same, on the saver's event loop ---------------------------------

    def _sync(self, call: Coroutine[Any, Any, _T]) -> _T:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            call.close()
            raise asyncio.InvalidStateError(
                "the stageline saver's sync methods block: call them from another thread, or "
                "use the async ones (aget_tuple, aput, ...) on its event loop"
            )
        return asyncio.run_coroutine_threadsafe(call, self._loop).result()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._sync(self.aget_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        async def collect() -> list[CheckpointTuple]:
            found = self.alist(config, filter=filter, before=before, limit=limit)
            return [item async for item in found]

        yield from self._sync(collect())

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._sync(self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._sync(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._sync(self.adelete_thread(thread_id))


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }
