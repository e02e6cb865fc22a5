"""The in-memory ledger: the test double, and ``--ephemeral`` runs. Nothing survives exit."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.base import SerializerProtocol

from stageline.errors import InvalidTransition, LeaseHeld, RunNotFound
from stageline.ledger._base import Publisher, holder_is_dead
from stageline.ledger._chat import ChatMemory
from stageline.ledger._lineage import Lineage, LineageMemory
from stageline.ledger._memory_human import HumanMemory
from stageline.ledger._outbox import OutboxMemory
from stageline.ledger._outcomes import OutcomesMemory
from stageline.ledger._search import RunSearchMemory
from stageline.ledger._threads import ThreadsMemory
from stageline.ledger._tokens import TokensMemory
from stageline.ledger.records import Event, NodeRecord, Run, RunStatus
from stageline.names import check_run_id

__all__ = ["MemoryLedger", "open_memory"]


class MemoryLedger(
    ChatMemory,
    HumanMemory,
    OutcomesMemory,
    OutboxMemory,
    LineageMemory,
    TokensMemory,
    RunSearchMemory,
    ThreadsMemory,
):
    """Same behaviour as the SQL ledger, held in dicts."""

    def __init__(self, url: str = "memory://") -> None:
        self.url = url
        self.publisher: Publisher | None = None
        self._runs: dict[str, Run] = {}
        self._nodes: dict[tuple[str, str, int, int], NodeRecord] = {}
        self._events: dict[str, list[Event]] = {}
        self._outcomes = {}
        self._cancel_watch: dict[str, Callable[[], None]] = {}

    async def setup(self) -> None:
        return None

    async def schema_version(self) -> int:
        from stageline.ledger._schema import MIGRATIONS

        return len(MIGRATIONS)

    def _get(self, run_id: str) -> Run:
        try:
            return self._runs[run_id]
        except KeyError:
            raise RunNotFound(run_id) from None

    async def create_run(
        self, run: Run, *, events: Iterable[Event] = (), lineage: Lineage | None = None
    ) -> Run:
        check_run_id(run.run_id)
        if run.run_id in self._runs:
            raise InvalidTransition(f"run {run.run_id} already exists")
        self._runs[run.run_id] = run
        self._put_lineage(lineage)
        self._events[run.run_id] = []
        self._publish(self._write(run.run_id, list(events)))
        return run

    async def get_run(self, run_id: str) -> Run:
        check_run_id(run_id)  # every runner method reads its run first: a name, never a path
        return self._get(run_id)

    async def list_runs(
        self,
        *,
        status: str | None = None,
        template: str | None = None,
        limit: int = 100,
        updated_before: float | None = None,
    ) -> list[Run]:
        found = [
            r
            for r in self._runs.values()
            if (status is None or r.status == status)
            and (template is None or r.template == template)
            and (updated_before is None or r.updated_at < updated_before)
        ]
        return sorted(found, key=lambda r: r.created_at, reverse=True)[:limit]

    async def transition(
        self,
        run_id: str,
        status: RunStatus,
        *,
        events: Iterable[Event] = (),
        expect: Iterable[RunStatus] | None = None,
        release: bool = False,
        cancel_wins: Iterable[Event] | None = None,
        **fields: Any,
    ) -> Run:
        run = self._get(run_id)
        if release:
            fields.update(lease_holder=None, lease_expires_at=None)
        if expect is not None and run.status not in set(expect):
            raise InvalidTransition(f"run {run_id} is {run.status}; cannot make it {status}")
        if cancel_wins is not None and run.cancel_requested:
            now = time.time()
            status, events = RunStatus.CANCELLED, cancel_wins
            fields = {"finished_at": now}
            if release:
                fields.update(lease_holder=None, lease_expires_at=None)
        run = replace(run, status=status, updated_at=time.time(), **fields)
        self._runs[run_id] = run
        self._publish(self._write(run_id, list(events)))
        return self._runs[run_id]

    async def request_cancel(self, run_id: str) -> Run:
        run = self._get(run_id)
        if run.status.terminal:
            raise InvalidTransition(f"run {run_id} already {run.status}")
        run = replace(run, cancel_requested=True, updated_at=time.time())
        self._runs[run_id] = run
        on_cancel = self._cancel_watch.pop(run_id, None)
        if on_cancel is not None:
            on_cancel()
        return run

    async def cancel_requested(self, run_id: str) -> bool:
        return self._get(run_id).cancel_requested

    def watch_cancel(self, run_id: str, on_cancel: Callable[[], None] | None) -> None:
        if on_cancel is None:
            self._cancel_watch.pop(run_id, None)
        elif self._get(run_id).cancel_requested:
            on_cancel()
        else:
            self._cancel_watch[run_id] = on_cancel

    async def acquire_lease(self, run_id: str, holder: str, ttl: float) -> Run:
        run = self._get(run_id)
        now = time.time()
        free = (
            run.lease_holder is None
            or (run.lease_expires_at or 0) < now
            or run.lease_holder == holder
            or holder_is_dead(run.lease_holder)
        )
        if not free:
            raise LeaseHeld(
                run_id,
                run.lease_holder or "?",
                time.strftime("%H:%M:%S", time.localtime(run.lease_expires_at or now)),
            )
        run = replace(run, lease_holder=holder, lease_expires_at=now + ttl)
        self._runs[run_id] = run
        return run

    async def renew_lease(self, run_id: str, holder: str, ttl: float) -> Run | None:
        run = self._get(run_id)
        if run.lease_holder != holder:
            return None
        run = replace(run, lease_expires_at=time.time() + ttl)
        self._runs[run_id] = run
        return run

    async def release_lease(self, run_id: str, holder: str) -> None:
        run = self._get(run_id)
        if run.lease_holder == holder:
            self._runs[run_id] = replace(run, lease_holder=None, lease_expires_at=None)

    def stage_node(self, record: NodeRecord) -> None:
        self._nodes[(record.run_id, record.task_id, record.attempt, record.try_no)] = record

    def stage_event(self, event: Event) -> None:
        self._publish(self._write(event.run_id, [event]))

    async def flush(self) -> None:
        return None

    async def append_events(self, run_id: str, evs: Iterable[Event]) -> list[Event]:
        self._get(run_id)
        written = self._write(run_id, list(evs))
        self._publish(written)
        return written

    def _write(self, run_id: str, evs: list[Event]) -> list[Event]:
        if not evs:
            return []
        run = self._get(run_id)
        numbered = [replace(e, seq=run.last_seq + i + 1) for i, e in enumerate(evs)]
        self._runs[run_id] = replace(run, last_seq=run.last_seq + len(evs))
        self._events.setdefault(run_id, []).extend(numbered)
        return numbered

    def _publish(self, written: list[Event]) -> None:
        if written and self.publisher is not None:
            self.publisher(written)

    async def node_records(self, run_id: str) -> list[NodeRecord]:
        found = [n for k, n in self._nodes.items() if k[0] == run_id]
        return sorted(found, key=lambda n: (n.started_at, n.node))

    async def events(
        self, run_id: str, *, after: int = 0, categories: Iterable[str] | None = None
    ) -> list[Event]:
        wanted = set(categories) if categories is not None else None
        return [
            e
            for e in self._events.get(run_id, [])
            if e.seq > after and (wanted is None or e.category in wanted)
        ]

    async def delete_run(self, run_id: str) -> None:
        self._runs.pop(run_id, None)
        self._events.pop(run_id, None)
        for key in [k for k in self._nodes if k[0] == run_id]:
            del self._nodes[key]
        self._forget_run(run_id)
        self._forget_cursors(run_id)
        self._forget_lineage(run_id)
        self._forget_threads(run_id)


def open_memory(serde: SerializerProtocol) -> tuple[MemoryLedger, InMemorySaver]:
    return MemoryLedger(), InMemorySaver(serde=serde)
