"""Reads of the ledger that the runner and the read commands share; they need no LangGraph."""

from __future__ import annotations

from stageline.ledger import LedgerStore, Wait, WaitKind

__all__ = ["pending_waits", "waiting_on"]


async def waiting_on(ledger: LedgerStore, run_id: str | None = None) -> list[tuple[Wait, str]]:
    """Pending gates, question sets and interrupts of waiting runs (of one run), oldest first,
    each with its run's template: one query, however many runs wait. A wait for CI is no
    person's to answer: it is not listed (``stageline show`` shows it)."""
    found = await ledger.waiting_on(run_id=run_id)
    return [(w, t) for w, t in found if w.kind is not WaitKind.CI]


async def pending_waits(ledger: LedgerStore, run_id: str | None = None) -> list[Wait]:
    """Pending gates, question sets and interrupts of waiting runs (of one run), oldest first."""
    return [wait for wait, _ in await waiting_on(ledger, run_id)]
