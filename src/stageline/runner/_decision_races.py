"""Where a decision meets another process's: what a decider read may have moved on.

A decider reads the run, then its waits, then its checkpoint; another process may decide and
advance the run between any two of those reads. These say when that happened, so the first
decision stands (``AlreadyDecided``) and the checkpoint is not called damaged for it.
"""

from __future__ import annotations

from collections.abc import Sequence

from stageline.errors import CheckpointCorrupt
from stageline.ledger import LedgerStore, Run, Wait, WaitKind, WaitStatus, already_decided
from stageline.runner._wait_pick import names_wait

__all__ = ["RECHECKS", "LedgerMoved", "as_now", "first_stands", "ledger_moved"]

RECHECKS = 3
"""How many times a response is checked again because the ledger moved while it was checked."""


class LedgerMoved(Exception):
    """The checkpoint disagreed with waits another process changed meanwhile: check again."""

    def __init__(self, corrupt: CheckpointCorrupt) -> None:
        super().__init__(str(corrupt))
        self.corrupt = corrupt


def _marks(waits: Sequence[Wait]) -> list[tuple[str, int, WaitStatus]]:
    return sorted((w.wait_id, w.round, w.status) for w in waits)


def as_now(wait: Wait, waits: Sequence[Wait]) -> Wait:
    """``wait`` as ``waits`` (read now) hold it: still pending, or the first decision stands."""
    now = next((w for w in waits if (w.wait_id, w.round) == (wait.wait_id, wait.round)), wait)
    if now.status in (WaitStatus.DECIDED, WaitStatus.APPLIED):
        raise already_decided(now)
    return now


async def ledger_moved(ledger: LedgerStore, run: Run, waits: Sequence[Wait]) -> bool:
    """Whether the ledger's run or waits changed since ``run`` and ``waits`` were read."""
    now = await ledger.get_run(run.run_id)
    if (now.status, now.attempt, now.last_seq) != (run.status, run.attempt, run.last_seq):
        return True
    return _marks(await ledger.waits(run.run_id)) != _marks(waits)


async def first_stands(
    ledger: LedgerStore, run: Run, waits: list[Wait], kind: WaitKind, name: str | None
) -> tuple[Run, list[Wait]]:
    """``AlreadyDecided`` when someone came first (a race, or a second answer): the first
    one stands. The run was read before its waits: when they disagree (the wait applied,
    the run still waiting for a person), both are read again, since another process may
    have decided and advanced the run between the two reads."""
    for fresh in (False, True):
        if fresh:
            run = await ledger.get_run(run.run_id)
            waits = await ledger.waits(run.run_id)
        mine = [w for w in waits if w.kind is kind and (name is None or names_wait(w, name))]
        taken = [w for w in mine if w.status in (WaitStatus.DECIDED, WaitStatus.APPLIED)]
        latest = max(taken, key=lambda w: w.decided_at or 0) if taken else None
        if latest is None or any(w.status is WaitStatus.PENDING for w in mine):
            break
        if (
            name is not None
            or latest.status is WaitStatus.DECIDED
            or not run.status.waits_for_person
        ):
            raise already_decided(latest)
    return run, waits
