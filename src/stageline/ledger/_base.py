"""The ledger's store interface, shared by every backend."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from stageline.ledger._human import Effect, Wait, WaitChanges, WaitStatus
from stageline.ledger.records import Claimed, Event, NodeRecord, Run, RunClaim, RunStatus

if TYPE_CHECKING:
    from stageline.ledger._chat import ChatMessage
    from stageline.ledger._crons import Cron
    from stageline.ledger._lineage import Lineage
    from stageline.ledger._outbox import Claim, SinkStart
    from stageline.ledger._outcome_stats import OutcomeGroup
    from stageline.ledger._outcomes import Outcome
    from stageline.ledger._search import RunPage, RunQuery
    from stageline.ledger._sessions import SessionPolicy
    from stageline.ledger._threads import ApiRun, ApiRunStatus, ThreadMeta
    from stageline.ledger._tokens import Scope, Token

__all__ = ["LedgerStore", "Publisher", "holder_is_dead", "this_holder"]

Publisher = Callable[[list[Event]], None]
"""Called with events once they are committed (sinks hang off it)."""


def this_holder() -> str:
    """A lease holder name for this process: ``host:pid:token`` (token tells runners apart)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def holder_is_dead(holder: str) -> bool:
    """True when ``holder`` is a process on this host that no longer exists."""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class LedgerStore(Protocol):
    """The durable record of runs; ``SqlLedger`` implements it (SQLite file or memory, Postgres)."""

    url: str
    publisher: Publisher | None

    async def setup(self) -> None: ...
    async def schema_version(self) -> int: ...
    async def create_run(
        self, run: Run, *, events: Iterable[Event] = (), lineage: Lineage | None = None
    ) -> Run: ...
    async def get_run(self, run_id: str) -> Run: ...
    async def list_runs(
        self,
        *,
        status: str | None = None,
        template: str | None = None,
        limit: int = 100,
        updated_before: float | None = None,
    ) -> list[Run]: ...
    async def search_runs(self, query: RunQuery) -> RunPage: ...
    async def transition(
        self,
        run_id: str,
        status: RunStatus,
        *,
        events: Iterable[Event] = (),
        expect: Iterable[RunStatus] | None = None,
        release: bool = False,
        cancel_wins: Iterable[Event] | None = None,
        lease: tuple[str, float] | None = None,
        **fields: Any,
    ) -> Run: ...
    async def end_advance(
        self,
        run_id: str,
        status: RunStatus,
        *,
        waits: WaitChanges,
        events: Iterable[Event] = (),
        expect: Iterable[RunStatus] | None = None,
        release: bool = False,
        cancel_wins: Iterable[Event] | None = None,
        **fields: Any,
    ) -> Run | None: ...
    async def claim(self, run_id: str, claim: RunClaim | Callable[[Run], RunClaim]) -> Claimed: ...
    async def request_cancel(self, run_id: str) -> Run: ...
    async def cancel_requested(self, run_id: str) -> bool: ...
    def watch_cancel(self, run_id: str, on_cancel: Callable[[], None] | None) -> None: ...
    def expect_no_checkpoint(self, run_id: str, unsaved: bool = True) -> None: ...
    async def acquire_lease(self, run_id: str, holder: str, ttl: float) -> Run: ...
    async def renew_lease(self, run_id: str, holder: str, ttl: float) -> Run | None: ...
    async def release_lease(self, run_id: str, holder: str) -> None: ...
    def stage_node(self, record: NodeRecord) -> None: ...
    def stage_event(self, event: Event) -> None: ...
    async def flush(self) -> None: ...
    async def append_events(self, run_id: str, evs: Iterable[Event]) -> list[Event]: ...
    async def node_records(self, run_id: str) -> list[NodeRecord]: ...
    async def events(
        self, run_id: str, *, after: int = 0, categories: Iterable[str] | None = None
    ) -> list[Event]: ...
    async def delete_run(self, run_id: str) -> None: ...

    # -- gates and questions (waits) --------------------------------------------------------
    async def open_waits(
        self, run_id: str, asked: Sequence[Wait], *, events: Iterable[Event] = ()
    ) -> list[Wait]: ...
    async def decide_wait(
        self,
        run_id: str,
        wait_id: str,
        round: int,
        *,
        response: Mapping[str, Any],
        actor: str | None,
        note: str | None = None,
        events: Iterable[Event] = (),
    ) -> Wait: ...
    async def decide_and_claim(
        self,
        run_id: str,
        wait_id: str,
        round: int,
        *,
        response: Mapping[str, Any],
        actor: str | None,
        claim: RunClaim,
        note: str | None = None,
        events: Iterable[Event] = (),
    ) -> Claimed | None: ...
    async def settle_wait(
        self,
        run_id: str,
        wait_id: str,
        round: int,
        status: WaitStatus,
        *,
        reason: str | None = None,
        expect: Iterable[WaitStatus] = ...,
        reopen: bool = False,
        events: Iterable[Event] = (),
    ) -> Wait | None: ...
    async def advance_policy(
        self, run_id: str, wait_id: str, round: int, *, step: int, events: Iterable[Event] = ()
    ) -> bool: ...
    async def close_waits(self, run_id: str, reason: str) -> int: ...
    async def waits(self, run_id: str) -> list[Wait]: ...
    async def pending_waits(self, *, run_id: str | None = None) -> list[Wait]: ...
    async def waiting_on(self, *, run_id: str | None = None) -> list[tuple[Wait, str]]: ...

    # -- the side-effect journal ------------------------------------------------------------
    async def begin_effect(self, effect: Effect) -> bool: ...
    async def finish_effect(self, run_id: str, node: str, key: str, result: Any) -> None: ...
    async def get_effect(self, run_id: str, node: str, key: str) -> Effect | None: ...
    async def forget_effect(self, run_id: str, node: str, key: str) -> bool: ...
    async def effects(self, run_id: str) -> list[Effect]: ...

    # -- lineage (forks) --------------------------------------------------------------------
    async def lineage(self, run_id: str) -> Lineage | None: ...
    async def forks(self, run_id: str) -> list[Lineage]: ...

    # -- capability outcomes ----------------------------------------------------------------
    def stage_outcome(self, outcome: Outcome) -> None: ...
    async def record_outcomes(self, rows: Iterable[Outcome]) -> None: ...
    async def outcomes(
        self,
        *,
        template: str | None = None,
        since: float | None = None,
        node: str | None = None,
        routed: bool = False,
        limit: int | None = None,
    ) -> list[Outcome]: ...
    async def outcome_groups(
        self, *, template: str | None = None, since: float | None = None
    ) -> list[OutcomeGroup]: ...

    # -- the sinks' outbox ------------------------------------------------------------------
    async def sink_start(self, sink_id: str, *, now: float | None = None) -> SinkStart: ...
    async def due_runs(
        self, sink_id: str, *, since: float, now: float | None = None
    ) -> list[str]: ...
    async def claim_events(
        self,
        sink_id: str,
        run_id: str,
        *,
        holder: str,
        until: float,
        started_at: float,
        limit: int,
        steal: str | None = None,
        now: float | None = None,
    ) -> Claim | str | None: ...
    async def ack_events(self, sink_id: str, run_id: str, *, holder: str, seq: int) -> bool: ...
    async def release_events(
        self,
        sink_id: str,
        run_id: str,
        *,
        holder: str,
        retry_at: float | None = None,
        failed_upto: int | None = None,
    ) -> None: ...
    async def advance_watermark(
        self, sink_id: str, *, since: float, now: float | None = None
    ) -> float: ...
    async def sink_cursor(self, sink_id: str, run_id: str) -> int | None: ...

    # -- API tokens -------------------------------------------------------------------------
    async def create_token(self, name: str, scope: Scope | str, token_hash: str) -> Token: ...
    async def tokens(self) -> list[Token]: ...
    async def revoke_token(self, name: str) -> bool: ...
    async def authenticate(self, secret: str) -> Token | None: ...
    async def has_tokens(self) -> bool: ...

    # -- dashboard sessions -----------------------------------------------------------------
    async def start_session(
        self, session_hash: str, token_hash: str, policy: SessionPolicy, *, now: float | None = None
    ) -> None: ...
    async def session_token(
        self, session_hash: str, policy: SessionPolicy, *, now: float | None = None
    ) -> Token | None: ...
    async def end_session(self, session_hash: str) -> bool: ...

    # -- LangGraph API threads and runs ------------------------------------------------------
    async def put_thread(self, meta: ThreadMeta) -> ThreadMeta: ...
    async def thread_meta(self, run_id: str) -> ThreadMeta | None: ...
    async def thread_metas(self) -> list[ThreadMeta]: ...
    async def set_thread_metadata(self, run_id: str, metadata: Mapping[str, Any]) -> ThreadMeta: ...
    async def add_api_run(self, run: ApiRun) -> ApiRun: ...
    async def api_run(self, api_run_id: str) -> ApiRun | None: ...
    async def api_runs(self, run_id: str) -> list[ApiRun]: ...
    async def set_api_run_status(
        self, api_run_id: str, status: ApiRunStatus | str, error: str | None = None
    ) -> None: ...

    # -- schedules (LangGraph's crons) -------------------------------------------------------
    async def put_cron(self, cron: Cron, *, now: float | None = None) -> Cron: ...
    async def cron(self, cron_id: str) -> Cron | None: ...
    async def crons(
        self,
        *,
        assistant_id: str | None = None,
        thread_id: str | None = None,
        enabled: bool | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> list[Cron]: ...
    async def update_cron(
        self, cron_id: str, changes: Mapping[str, Any], *, now: float | None = None
    ) -> Cron | None: ...
    async def delete_cron(self, cron_id: str) -> bool: ...
    async def due_crons(self, now: float) -> list[Cron]: ...
    async def claim_fire(
        self, cron: Cron, *, run_id: str, next_run_at: float | None, now: float
    ) -> bool: ...
    async def fired_by(self, run_id: str) -> str | None: ...
    async def cron_fires(self, cron_id: str) -> list[dict[str, Any]]: ...

    # -- two-way chat -----------------------------------------------------------------------
    async def chat_message(self, run_id: str, key: str) -> ChatMessage | None: ...
    async def save_chat_message(self, run_id: str, key: str, channel: str, ts: str) -> None: ...
    async def chat_thread_run(self, channel: str, thread_ts: str) -> str | None: ...
    async def chat_once(self, key: str) -> bool: ...
    async def chat_secret(self, name: str) -> str: ...
