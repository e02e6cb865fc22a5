"""Wake event streams as soon as this process commits a run's events (a sink on the bus).

Streams still read the ledger (events of runs advanced by other processes reach them on the
next poll); this only saves the wait when the server itself advances the run.
"""

from __future__ import annotations

import asyncio
from typing import Any

from stageline.ledger import Event

__all__ = ["RunNotifier"]


class RunNotifier:
    """An inline sink: ``wait(run_id, timeout)`` returns early when that run has new events."""

    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = {}

    def emit(self, event: Event, **future_kwargs: Any) -> None:
        for waiter in self._waiters.get(event.run_id, ()):
            waiter.set()

    async def wait(self, run_id: str, timeout: float) -> None:
        waiter = asyncio.Event()
        self._waiters.setdefault(run_id, set()).add(waiter)
        try:
            await asyncio.wait_for(waiter.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            mine = self._waiters.get(run_id)
            if mine is not None:
                mine.discard(waiter)
                if not mine:
                    del self._waiters[run_id]
