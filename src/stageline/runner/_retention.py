"""Retention: delete old runs' checkpoints and ledger rows, keeping their outcomes.

The aggregated outcomes (``stageline_outcomes``, what ``stats`` and the router read) are not
tied to a run's other rows, so they outlive the runs they describe.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from stageline.errors import UsageError
from stageline.ledger import RunStatus
from stageline.runner._worktrees import remove_worktree

if TYPE_CHECKING:
    from stageline.config import Settings
    from stageline.ledger import Backend, Reclaimed

__all__ = ["PRUNABLE", "PRUNED_BY_DEFAULT", "PruneReport", "Retention"]

PRUNED_BY_DEFAULT = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.REJECTED)
"""The statuses ``prune`` deletes unless told otherwise: runs nobody will advance again."""

PRUNABLE = (
    *PRUNED_BY_DEFAULT,
    RunStatus.WAITING,
    RunStatus.PARKED,
    RunStatus.QUEUED,
    RunStatus.TAKEN_OVER,
)
"""A taken-over run is pruned only when asked, and its worktree and branch stay the person's."""
"""A running run is never pruned: a live process may be advancing it (cancel it first)."""

_log = logging.getLogger("stageline.runner")

BATCH = 200
"""Runs deleted per look at the ledger."""


@dataclass(frozen=True, kw_only=True)
class PruneReport:
    """What one prune deleted."""

    cutoff: float
    """Runs idle (not updated) since before this time were deleted."""
    run_ids: list[str] = field(default_factory=list)
    reclaimed: Reclaimed | None = None
    """The database's size before and after ``vacuum`` (None: not asked, or nothing on disk)."""


class Retention:
    """Deletes runs: one on request, or the old ones of some statuses (``prune``)."""

    def __init__(self, settings: Settings, backend: Backend) -> None:
        self.settings = settings
        self.backend = backend
        self.ledger = backend.ledger

    async def delete(self, run_id: str, *, keep_work: bool = False) -> None:
        """Delete one run: its git worktree and branch (``stageline/RUN``, when stageline made
        it and nothing has it checked out), its checkpoints, then its ledger rows (a delete cut
        short is finished by the next). The caller has made sure no process advances it.
        ``keep_work``: leave the worktree and branch (a person took the work over)."""
        import asyncio  # here: `stageline --help` imports this module for its defaults

        folder = self.settings.run_dir(run_id)
        removed = [] if keep_work else await asyncio.to_thread(remove_worktree, folder, run_id)
        if removed:
            _log.info("run %s: removed %s", run_id, ", ".join(removed))
        await self.backend.saver.adelete_thread(run_id)
        await self.ledger.delete_run(run_id)

    async def prune(
        self,
        *,
        older_than: float,
        statuses: Iterable[RunStatus | str] = PRUNED_BY_DEFAULT,
        now: float | None = None,
        vacuum: bool = False,
    ) -> PruneReport:
        """Delete the runs of ``statuses`` not updated for ``older_than`` seconds: their
        checkpoints, then their ledger rows (so a prune cut short is finished by the next).
        ``vacuum``: then give the space back (``reclaim_space``: SQLite's file shrinks)."""
        if older_than <= 0:
            raise UsageError(f"older_than must be positive, got {older_than!r}")
        wanted = [RunStatus(s) for s in statuses]
        if bad := [s for s in wanted if s not in PRUNABLE]:
            raise UsageError(
                f"runs that are {bad[0]} cannot be pruned (a process may be advancing them); "
                f"cancel them first, or prune: {', '.join(PRUNABLE)}"
            )
        report = PruneReport(cutoff=(now or time.time()) - older_than)
        for status in wanted:
            while True:
                old = await self.ledger.list_runs(
                    status=str(status), limit=BATCH, updated_before=report.cutoff
                )
                for run in old:
                    await self.delete(run.run_id, keep_work=status is RunStatus.TAKEN_OVER)
                    report.run_ids.append(run.run_id)
                if len(old) < BATCH:
                    break
        if vacuum:
            from stageline.ledger import reclaim_space

            report = replace(report, reclaimed=await reclaim_space(self.ledger))
        return report
