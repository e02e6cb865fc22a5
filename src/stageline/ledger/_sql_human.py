"""The SQL ledger's part for people and side effects: waits (gates, questions) and effects.

Every race is decided by the database: a round is decided by ``UPDATE ... WHERE status =
'pending'`` (the row count says who won), a policy step by a compare-and-set on its counter,
an effect is begun by an insert that does nothing on conflict.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, bindparam, delete, literal_column, select, update
from sqlalchemy.sql import ClauseElement

from stageline.errors import InvalidTransition, LeaseHeld
from stageline.ledger._human import (
    Effect,
    EffectStatus,
    Wait,
    WaitChanges,
    WaitStatus,
    _json,
    already_decided,
)
from stageline.ledger._schema import effects, runs, waits
from stageline.ledger.records import Claimed, Event, RunClaim

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from stageline.ledger._executor import Executor

__all__ = ["HumanSql", "RoundMoved"]


class HumanSql:
    """Mixed into ``SqlLedger``: uses its transactions, compiled statements and event numbering."""

    if TYPE_CHECKING:
        _upsert: Any

        def _tx(self) -> AbstractAsyncContextManager[Executor]: ...
        def _read(self) -> AbstractAsyncContextManager[Executor]: ...
        def _sql(self, stmt: ClauseElement) -> str: ...
        async def _write_events(
            self, x: Executor, run_id: str, evs: list[Event]
        ) -> list[Event]: ...
        def _publish(self, written: list[Event]) -> None: ...
        async def _claimed_in(self, x: Executor, run_id: str, claim: RunClaim) -> Claimed: ...

    def _insert_ignoring(self, table: Any, keys: list[str]) -> Any:
        name = f"_insert_{table.name}_stmt"
        stmt = self.__dict__.get(name)
        if stmt is None:
            stmt = self._upsert(table).on_conflict_do_nothing(index_elements=keys)
            self.__dict__[name] = stmt
        return stmt

    async def _rows(
        self, x: Executor, stmt: ClauseElement, params: Mapping[str, Any]
    ) -> list[Wait]:
        return [Wait.from_row(r) for r in await x.fetch(self._sql(stmt), params)]

    # -- waits ------------------------------------------------------------------------------

    async def open_waits(
        self, run_id: str, asked: Sequence[Wait], *, events: Iterable[Event] = ()
    ) -> list[Wait]:
        """Record what the run waits on. Asking again in the same attempt changes nothing; a
        new attempt, or a round being decided that never reached the node, opens a new round."""
        async with self._tx() as x:
            opened = await self._open_in(x, run_id, asked)
            written = await self._write_events(x, run_id, list(events))
        self._publish(written)
        return opened

    async def _open_in(self, x: Executor, run_id: str, asked: Sequence[Wait]) -> list[Wait]:
        """``open_waits``'s rows, in the caller's transaction."""
        opened: list[Wait] = []
        insert = self._insert_ignoring(waits, ["run_id", "wait_id", "round"])
        for wait in asked:
            key = {"run_id": run_id, "wait_id": wait.wait_id}
            latest = next(iter(await self._rows(x, _ROUNDS, key)), None)
            if (
                latest is not None
                and latest.status is WaitStatus.PENDING
                and (latest.attempt, latest.interrupt_id) == (wait.attempt, wait.interrupt_id)
            ):
                opened.append(latest)
                continue
            if latest is not None and latest.status.open:
                status, why = (
                    (WaitStatus.CLOSED, f"asked again in attempt {wait.attempt}")
                    if latest.status is WaitStatus.PENDING
                    else (
                        WaitStatus.ROLLED_BACK,
                        "the run asked again: the resume carrying it never reached "
                        "the node (its process stopped)",
                    )
                )
                await x.execute(
                    self._sql(_SETTLE), _settle_params(latest, status, why, [latest.status])
                )
            fresh = replace(
                wait,
                run_id=run_id,
                round=latest.round + 1 if latest else 1,
                status=WaitStatus.PENDING,
            )
            await x.execute(self._sql(insert), fresh.to_row())
            opened.append(Wait.from_row(fresh.to_row()))
        return opened

    async def _change_waits(self, x: Executor, run_id: str, changes: WaitChanges) -> list[Event]:
        """Settle and ask as ``changes`` says, in the caller's transaction; returns the events
        to write. ``RoundMoved`` (roll the transaction back) when a round to settle is no longer
        ``decided``: the caller settles them one by one, reading what became of each."""
        said: list[Event] = []
        for change in changes.settle:
            wait = change.wait
            params = _settle_params(wait, change.status, change.reason, [WaitStatus.DECIDED])
            if not await x.execute(self._sql(_SETTLE), params):
                raise RoundMoved(wait.run_id, wait.wait_id, wait.round)
            if change.reopen:
                insert = self._insert_ignoring(waits, ["run_id", "wait_id", "round"])
                await x.execute(self._sql(insert), _reopened(wait).to_row())
            said += change.events
        await self._open_in(x, run_id, changes.asked)
        return said + list(changes.asked_events)

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
    ) -> Wait:
        """Record the decision or answer for a pending round; the first one wins, any later one
        raises ``AlreadyDecided``."""
        params = _decide_params(run_id, wait_id, round, response, actor, note)
        async with self._tx() as x:
            won = await x.execute(self._sql(_DECIDE), params)
            found = await self._rows(x, _ONE_WAIT, params)
            if not found:
                raise InvalidTransition(f"run {run_id} has no wait {wait_id!r} round {round}")
            if not won:
                raise already_decided(found[0])
            written = await self._write_events(x, run_id, list(events))
        self._publish(written)
        return found[0]

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
    ) -> Claimed | None:
        """``decide_wait`` and the claim of the run that applies the decision (``claim``), in
        one transaction. None, and nothing recorded, when the claim is refused (the lease held,
        or the run moved on): the caller records the decision on its own and rolls it back, so
        the refused attempt stays on record."""
        params = _decide_params(run_id, wait_id, round, response, actor, note)
        try:
            async with self._tx() as x:
                won = await x.execute(self._sql(_DECIDE), params)
                found = await self._rows(x, _ONE_WAIT, params)
                if not found:
                    raise InvalidTransition(f"run {run_id} has no wait {wait_id!r} round {round}")
                if not won:
                    raise already_decided(found[0])
                try:
                    claimed = await self._claimed_in(x, run_id, claim)
                except (LeaseHeld, InvalidTransition) as exc:
                    raise _Refused from exc
                written = await self._write_events(x, run_id, [*events, *claim.events])
        except _Refused:
            return None
        self._publish(written)
        return claimed

    async def settle_wait(
        self,
        run_id: str,
        wait_id: str,
        round: int,
        status: WaitStatus,
        *,
        reason: str | None = None,
        expect: Iterable[WaitStatus] = (WaitStatus.DECIDED,),
        reopen: bool = False,
        events: Iterable[Event] = (),
    ) -> Wait | None:
        """Move a round on from one of the ``expect`` statuses; with ``reopen``, ask it again in
        a new pending round. None (and no events) when the round was not in those statuses."""
        key = {"run_id": run_id, "wait_id": wait_id, "round": round}
        async with self._tx() as x:
            rows = await self._rows(x, _ONE_WAIT, key)
            if not rows or not await x.execute(
                self._sql(_SETTLE), _settle_params(rows[0], status, reason, expect)
            ):
                return None
            settled = (await self._rows(x, _ONE_WAIT, key))[0]
            if reopen:
                insert = self._insert_ignoring(waits, ["run_id", "wait_id", "round"])
                await x.execute(self._sql(insert), _reopened(settled).to_row())
            written = await self._write_events(x, run_id, list(events))
        self._publish(written)
        return settled

    async def advance_policy(
        self, run_id: str, wait_id: str, round: int, *, step: int, events: Iterable[Event] = ()
    ) -> bool:
        """Count deadline step ``step`` as applied, if nobody else did; True for the winner."""
        params = {
            "run_id": run_id,
            "wait_id": wait_id,
            "round": round,
            "step": step,
            "prev": step - 1,
        }
        async with self._tx() as x:
            if not await x.execute(self._sql(_ADVANCE_POLICY), params):
                return False
            written = await self._write_events(x, run_id, list(events))
        self._publish(written)
        return True

    async def close_waits(self, run_id: str, reason: str) -> int:
        """Close every pending round of a run (it stopped waiting); how many were closed."""
        async with self._tx() as x:
            return await x.execute(
                self._sql(_CLOSE_PENDING),
                {
                    "run_id": run_id,
                    "closed": str(WaitStatus.CLOSED),
                    "reason": reason,
                    "now": time.time(),
                },
            )

    async def waits(self, run_id: str) -> list[Wait]:
        """Every round of every wait of a run, oldest first."""
        async with self._read() as x:
            return await self._rows(x, _RUN_WAITS, {"run_id": run_id})

    async def pending_waits(self, *, run_id: str | None = None) -> list[Wait]:
        """Pending rounds, oldest first: of one run, or of every run."""
        stmt, params = (_RUN_PENDING, {"run_id": run_id}) if run_id else (_ALL_PENDING, {})
        async with self._read() as x:
            return await self._rows(x, stmt, params)

    async def waiting_on(self, *, run_id: str | None = None) -> list[tuple[Wait, str]]:
        """Pending rounds of runs that wait for a person (waiting or parked; of one run), oldest
        first, each with its run's
        template: one query, however many runs wait."""
        stmt, params = (_WAITING_RUN, {"run_id": run_id}) if run_id else (_WAITING, {})
        async with self._read() as x:
            rows = await x.fetch(self._sql(stmt), params)
        found = []
        for row in rows:
            template = row.pop("run_template")
            found.append((Wait.from_row(row), str(template)))
        return found

    # -- effects ----------------------------------------------------------------------------

    async def begin_effect(self, effect: Effect) -> bool:
        """Record that an effect is about to run; False if (run, node, key) is recorded already."""
        insert = self._insert_ignoring(effects, ["run_id", "node", "key"])
        async with self._tx() as x:
            return bool(await x.execute(self._sql(insert), effect.to_row()))

    async def finish_effect(self, run_id: str, node: str, key: str, result: Any) -> None:
        async with self._tx() as x:
            await x.execute(
                self._sql(_FINISH_EFFECT),
                {
                    "run_id": run_id,
                    "node": node,
                    "key": key,
                    "result": _json(result),
                    "now": time.time(),
                },
            )

    async def get_effect(self, run_id: str, node: str, key: str) -> Effect | None:
        async with self._read() as x:
            rows = await x.fetch(
                self._sql(_ONE_EFFECT), {"run_id": run_id, "node": node, "key": key}
            )
        return Effect.from_row(rows[0]) if rows else None

    async def forget_effect(self, run_id: str, node: str, key: str) -> bool:
        """Drop an effect's record, so it runs again; True if there was one."""
        async with self._tx() as x:
            return bool(
                await x.execute(
                    self._sql(_DELETE_EFFECT), {"run_id": run_id, "node": node, "key": key}
                )
            )

    async def effects(self, run_id: str) -> list[Effect]:
        async with self._read() as x:
            rows = await x.fetch(self._sql(_RUN_EFFECTS), {"run_id": run_id})
        return [Effect.from_row(r) for r in rows]


class _Refused(Exception):
    """The claim that goes with a decision was refused: roll the decision back with it."""


def _decide_params(
    run_id: str,
    wait_id: str,
    round: int,
    response: Mapping[str, Any],
    actor: str | None,
    note: str | None,
) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "wait_id": wait_id,
        "round": round,
        "response": _json(dict(response)),
        "actor": actor,
        "note": note,
        "now": time.time(),
    }


class RoundMoved(Exception):  # rolls a transaction back; never leaves the ledger
    """A round ``WaitChanges`` settles was moved on by someone else first."""


def _reopened(wait: Wait) -> Wait:
    """The next round of ``wait``, pending again."""
    return replace(
        wait,
        round=wait.round + 1,
        status=WaitStatus.PENDING,
        response=None,
        actor=None,
        note=None,
        decided_at=None,
        settled_at=None,
        reason=None,
    )


def _settle_params(
    wait: Wait, status: WaitStatus, reason: str | None, expect: Iterable[WaitStatus]
) -> dict[str, Any]:
    allowed = [str(s) for s in expect]
    if not 1 <= len(allowed) <= 3:
        raise ValueError("expect names one to three statuses")
    allowed += allowed[-1:] * (3 - len(allowed))
    return {
        "run_id": wait.run_id,
        "wait_id": wait.wait_id,
        "round": wait.round,
        "status": str(status),
        "reason": reason,
        "now": time.time(),
        **{f"e{i}": value for i, value in enumerate(allowed)},
    }


def _lit(value: str) -> Any:
    """A constant written into the statement, so every value a caller passes is a parameter."""
    return literal_column(f"'{value}'")


_KEY = and_(waits.c.run_id == bindparam("run_id"), waits.c.wait_id == bindparam("wait_id"))
_ROUND = and_(_KEY, waits.c.round == bindparam("round"))
_ONE_WAIT = select(waits).where(_ROUND)
_ROUNDS = select(waits).where(_KEY).order_by(waits.c.round.desc())
_RUN_WAITS = (
    select(waits)
    .where(waits.c.run_id == bindparam("run_id"))
    .order_by(waits.c.requested_at, waits.c.wait_id, waits.c.round)
)
_PENDING = waits.c.status == _lit(WaitStatus.PENDING)
_RUN_PENDING = (
    select(waits)
    .where(and_(waits.c.run_id == bindparam("run_id"), _PENDING))
    .order_by(waits.c.requested_at, waits.c.wait_id)
)
_ALL_PENDING = select(waits).where(_PENDING).order_by(waits.c.requested_at, waits.c.wait_id)
_WAITING = (
    select(waits, runs.c.template.label("run_template"))
    .join(runs, runs.c.run_id == waits.c.run_id)
    .where(and_(_PENDING, runs.c.status.in_([_lit("waiting"), _lit("parked")])))
    .order_by(waits.c.requested_at, waits.c.wait_id)
)
_WAITING_RUN = _WAITING.where(waits.c.run_id == bindparam("run_id"))
_DECIDE = (
    update(waits)
    .where(and_(_ROUND, _PENDING))
    .values(
        status=_lit(WaitStatus.DECIDED),
        response=bindparam("response"),
        actor=bindparam("actor"),
        note=bindparam("note"),
        decided_at=bindparam("now"),
    )
)
# Three placeholders keep the statement fixed (compiled once): the caller repeats a status.
_EXPECT = waits.c.status.in_([bindparam("e0"), bindparam("e1"), bindparam("e2")])
_SETTLE = (
    update(waits)
    .where(and_(_ROUND, _EXPECT))
    .values(status=bindparam("status"), reason=bindparam("reason"), settled_at=bindparam("now"))
)
_ADVANCE_POLICY = (
    update(waits)
    .where(and_(_ROUND, _PENDING, waits.c.policy_step == bindparam("prev")))
    .values(policy_step=bindparam("step"))
)
_CLOSE_PENDING = (
    update(waits)
    .where(and_(waits.c.run_id == bindparam("run_id"), _PENDING))
    .values(status=bindparam("closed"), reason=bindparam("reason"), settled_at=bindparam("now"))
)
_EFFECT_KEY = and_(
    effects.c.run_id == bindparam("run_id"),
    effects.c.node == bindparam("node"),
    effects.c.key == bindparam("key"),
)
_ONE_EFFECT = select(effects).where(_EFFECT_KEY)
_RUN_EFFECTS = (
    select(effects)
    .where(effects.c.run_id == bindparam("run_id"))
    .order_by(effects.c.started_at, effects.c.node, effects.c.key)
)
_FINISH_EFFECT = (
    update(effects)
    .where(_EFFECT_KEY)
    .values(
        status=_lit(EffectStatus.DONE), result=bindparam("result"), finished_at=bindparam("now")
    )
)
_DELETE_EFFECT = delete(effects).where(_EFFECT_KEY)
