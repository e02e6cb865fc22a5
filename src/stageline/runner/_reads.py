"""Reads of the ledger that the runner and the read commands share; they need no LangGraph."""

from __future__ import annotations

from stageline.ledger import LedgerStore, RunStatus, Wait

__all__ = ["pending_waits"]


async def pending_waits(ledger: LedgerStore, run_id: str | None = None) -> list[Wait]:
    """Pending gates and question sets of waiting runs (of one run), oldest first."""
    found = await ledger.pending_waits(run_id=run_id)
    status: dict[str, RunStatus] = {}
    for wait in found:
        if wait.run_id not in status:
            status[wait.run_id] = (await ledger.get_run(wait.run_id)).status
    return [w for w in found if status[w.run_id] is RunStatus.WAITING]
