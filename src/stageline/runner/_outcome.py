"""How an advance ends: the run's new status and the event that says so, in one transaction."""

from __future__ import annotations

import logging
import time
from typing import Any

from stageline.ledger import Event, EventCategory, LedgerStore, Run, RunStatus
from stageline.runner._journal import LedgerJournal
from stageline.runner._support import _describe_failure
from stageline.runner._waits import Settled

__all__ = ["finish_run"]

_log = logging.getLogger("stageline.runner")


async def finish_run(
    ledger: LedgerStore,
    run_id: str,
    outcome: BaseException | str | None,
    journal: LedgerJournal,
    settled: Settled,
) -> Run | None:
    """Record how an advance ended (see ``_finish``), with ``settled.changes`` to the run's
    waits in the same transaction. A cancel accepted before this commit wins over any other
    ending: the run ends ``cancelled`` and stops waiting for people. None, and nothing
    recorded, when a round to settle was moved on meanwhile (see ``settle_one_by_one``)."""
    run = await _finish(ledger, run_id, outcome, journal, settled)
    if run is not None and run.status is RunStatus.CANCELLED and outcome != "cancel":
        await ledger.close_waits(run_id, "the run was cancelled")
    return run


def _cancelled(run_id: str) -> list[Event]:
    return [
        Event(
            run_id=run_id,
            kind="run.cancelled",
            level="warning",
            message="cancelled: the cancel came before the run could end otherwise",
        )
    ]


async def _finish(
    ledger: LedgerStore,
    run_id: str,
    outcome: BaseException | str | None,
    journal: LedgerJournal,
    settled: Settled,
) -> Run | None:
    """Record how an advance ended: ``outcome`` is None (the graph ended), ``waiting``, a drain
    reason, or the error; ``settled`` says whether a gate rejected the run or a decision was
    rolled back (the run waits again)."""
    now = time.time()

    async def end(status: RunStatus, **kwargs: Any) -> Run | None:
        if settled.changes:
            return await ledger.end_advance(run_id, status, waits=settled.changes, **kwargs)
        return await ledger.transition(run_id, status, **kwargs)

    wins = None if outcome == "cancel" else _cancelled(run_id)
    if outcome is None and settled.taken_over is not None:
        by = settled.taken_over
        note = f" ({by.note})" if by.note else ""
        where = f"; the work is {settled.where}" if settled.where else ""
        message = f"taken over at gate {by.name!r} by {by.actor}{note}{where}"
        ended = (RunStatus.TAKEN_OVER, "run.taken_over", message, {"where": settled.where})
    elif outcome is None and settled.rejected is not None:
        by = settled.rejected
        note = f": {by.note}" if by.note else ""
        ended = (
            RunStatus.REJECTED,
            "run.rejected",
            f"rejected at gate {by.name!r} by {by.actor}{note}",
            {},
        )
    else:
        ended = None
    if ended is not None:  # a person ended the run at a gate
        status, kind, message, data = ended
        return await end(
            status,
            finished_at=now,
            release=True,
            cancel_wins=wins,
            events=[
                Event(
                    run_id=run_id,
                    kind=kind,
                    level="warning",
                    node=by.node,
                    message=message,
                    data=data,
                )
            ],
        )
    if settled.again is not None:  # a decision was rolled back: the run waits for it again
        return await end(
            RunStatus.WAITING,
            release=True,
            cancel_wins=wins,
            events=[
                Event(
                    run_id=run_id,
                    kind="run.waiting",
                    level="warning",
                    message=f"waiting again: the resume failed ({settled.again})",
                )
            ],
        )
    if outcome is None:
        return await end(
            RunStatus.SUCCEEDED,
            finished_at=now,
            release=True,
            cancel_wins=wins,
            events=[Event(run_id=run_id, kind="run.succeeded")],
        )
    if outcome == "waiting" and settled.parked:
        return await end(
            RunStatus.PARKED,
            release=True,
            events=[
                Event(
                    run_id=run_id,
                    kind="run.parked",
                    level="warning",
                    message="out of rounds: a person grants more, takes over or rejects",
                )
            ],
        )
    if outcome == "waiting":
        return await end(
            RunStatus.WAITING,
            release=True,
            cancel_wins=wins,
            events=[Event(run_id=run_id, kind="run.waiting")],
        )
    if outcome == "cancel":
        return await end(
            RunStatus.CANCELLED,
            finished_at=now,
            release=True,
            events=[Event(run_id=run_id, kind="run.cancelled", level="warning")],
        )
    if isinstance(outcome, str):  # drained for shutdown: another process may resume it
        return await end(
            RunStatus.QUEUED,
            release=True,
            cancel_wins=wins,
            events=[Event(run_id=run_id, kind="run.drained", message=outcome)],
        )
    failed = journal.last_failure
    error, phase = _describe_failure(outcome)
    if failed is not None:
        error, phase = failed.error or error, failed.failure_phase or phase
    _log.debug("run %s failed", run_id, exc_info=outcome)
    return await end(
        RunStatus.FAILED,
        finished_at=now,
        error=error,
        failure_phase=phase,
        release=True,
        cancel_wins=wins,
        failed_node=failed.node if failed else None,
        events=[
            Event(
                run_id=run_id,
                kind="run.failed",
                level="critical",
                message=error,
                category=EventCategory.ERROR,
                node=failed.node if failed else None,
                data={"failure_phase": phase},
            )
        ],
    )
