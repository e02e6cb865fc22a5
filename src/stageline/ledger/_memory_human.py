"""The in-memory ledger's part for people and side effects; behaves as ``HumanSql`` does."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from stageline.errors import InvalidTransition
from stageline.ledger._human import Effect, EffectStatus, Wait, WaitStatus, already_decided
from stageline.ledger.records import Event, Run

__all__ = ["HumanMemory"]


def _thaw(value: Any) -> Any:
    """A value as the SQL ledger gives it back: through JSON."""
    return json.loads(json.dumps(value, default=str))


class HumanMemory:
    """Mixed into ``MemoryLedger``."""

    if TYPE_CHECKING:
        _runs: dict[str, Run]

        def _get(self, run_id: str) -> Run: ...
        def _write(self, run_id: str, evs: list[Event]) -> list[Event]: ...
        def _publish(self, written: list[Event]) -> None: ...

    @property
    def _waits(self) -> dict[tuple[str, str, int], Wait]:
        return self.__dict__.setdefault("_waits_store", {})  # type: ignore[no-any-return]

    @property
    def _effects(self) -> dict[tuple[str, str, str], Effect]:
        return self.__dict__.setdefault("_effects_store", {})  # type: ignore[no-any-return]

    def _events_for(self, run_id: str, events: Iterable[Event]) -> None:
        evs = list(events)
        if evs:
            self._publish(self._write(run_id, evs))

    def _rounds(self, run_id: str, wait_id: str) -> list[Wait]:
        found = [w for k, w in self._waits.items() if k[:2] == (run_id, wait_id)]
        return sorted(found, key=lambda w: w.round, reverse=True)

    def _put(self, wait: Wait) -> Wait:
        wait = Wait.from_row(wait.to_row())  # what SQL would hand back
        self._waits[(wait.run_id, wait.wait_id, wait.round)] = wait
        return wait

    async def open_waits(
        self, run_id: str, asked: Sequence[Wait], *, events: Iterable[Event] = ()
    ) -> list[Wait]:
        self._get(run_id)
        opened: list[Wait] = []
        for wait in asked:
            latest = next(iter(self._rounds(run_id, wait.wait_id)), None)
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
                self._put(replace(latest, status=status, reason=why, settled_at=time.time()))
            opened.append(
                self._put(
                    replace(
                        wait,
                        run_id=run_id,
                        round=latest.round + 1 if latest else 1,
                        status=WaitStatus.PENDING,
                    )
                )
            )
        self._events_for(run_id, events)
        return opened

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
        found = self._waits.get((run_id, wait_id, round))
        if found is None:
            raise InvalidTransition(f"run {run_id} has no wait {wait_id!r} round {round}")
        if found.status is not WaitStatus.PENDING:
            raise already_decided(found)
        decided = self._put(
            replace(
                found,
                status=WaitStatus.DECIDED,
                response=_thaw(response),
                actor=actor,
                note=note,
                decided_at=time.time(),
            )
        )
        self._events_for(run_id, events)
        return decided

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
        found = self._waits.get((run_id, wait_id, round))
        if found is None or found.status not in set(expect):
            return None
        settled = self._put(replace(found, status=status, reason=reason, settled_at=time.time()))
        if reopen and (run_id, wait_id, round + 1) not in self._waits:
            self._put(
                replace(
                    settled,
                    round=round + 1,
                    status=WaitStatus.PENDING,
                    response=None,
                    actor=None,
                    note=None,
                    decided_at=None,
                    settled_at=None,
                    reason=None,
                )
            )
        self._events_for(run_id, events)
        return settled

    async def advance_policy(
        self, run_id: str, wait_id: str, round: int, *, step: int, events: Iterable[Event] = ()
    ) -> bool:
        found = self._waits.get((run_id, wait_id, round))
        if found is None or found.status is not WaitStatus.PENDING or found.policy_step != step - 1:
            return False
        self._put(replace(found, policy_step=step))
        self._events_for(run_id, events)
        return True

    async def close_waits(self, run_id: str, reason: str) -> int:
        pending = [
            w for k, w in self._waits.items() if k[0] == run_id and w.status is WaitStatus.PENDING
        ]
        for wait in pending:
            self._put(
                replace(wait, status=WaitStatus.CLOSED, reason=reason, settled_at=time.time())
            )
        return len(pending)

    async def waits(self, run_id: str) -> list[Wait]:
        found = [w for k, w in self._waits.items() if k[0] == run_id]
        return sorted(found, key=lambda w: (w.requested_at, w.wait_id, w.round))

    async def pending_waits(self, *, run_id: str | None = None) -> list[Wait]:
        found = [
            w
            for k, w in self._waits.items()
            if w.status is WaitStatus.PENDING and (run_id is None or k[0] == run_id)
        ]
        return sorted(found, key=lambda w: (w.requested_at, w.wait_id))

    async def waiting_on(self, *, run_id: str | None = None) -> list[tuple[Wait, str]]:
        found = await self.pending_waits(run_id=run_id)
        return [
            (w, self._runs[w.run_id].template)
            for w in found
            if w.run_id in self._runs and self._runs[w.run_id].status in ("waiting", "parked")
        ]

    async def begin_effect(self, effect: Effect) -> bool:
        key = (effect.run_id, effect.node, effect.key)
        if key in self._effects:
            return False
        self._effects[key] = Effect.from_row(effect.to_row())
        return True

    async def finish_effect(self, run_id: str, node: str, key: str, result: Any) -> None:
        found = self._effects.get((run_id, node, key))
        if found is not None:
            self._effects[(run_id, node, key)] = replace(
                found, status=EffectStatus.DONE, result=_thaw(result), finished_at=time.time()
            )

    async def get_effect(self, run_id: str, node: str, key: str) -> Effect | None:
        return self._effects.get((run_id, node, key))

    async def forget_effect(self, run_id: str, node: str, key: str) -> bool:
        return self._effects.pop((run_id, node, key), None) is not None

    async def effects(self, run_id: str) -> list[Effect]:
        found = [e for k, e in self._effects.items() if k[0] == run_id]
        return sorted(found, key=lambda e: (e.started_at, e.node, e.key))

    def _forget_run(self, run_id: str) -> None:
        for wait in [k for k in self._waits if k[0] == run_id]:
            del self._waits[wait]
        for effect in [k for k in self._effects if k[0] == run_id]:
            del self._effects[effect]
