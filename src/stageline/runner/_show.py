"""``show``'s read of a run without LangGraph: the ledger, plus the latest checkpoint as the
ledger package's own reader decodes it (``ledger._checkpoint_read``).

Whenever that reader cannot vouch for what LangGraph would make of the checkpoint (a type it
leaves to LangGraph, pending writes of finished tasks that LangGraph would fold into the
state, a waiting run whose pending writes disagree with the ledger), this answers None and
the caller asks ``Runner.status``, which reads through LangGraph and says exactly what is
wrong, as it always did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stageline.errors import CheckpointCorrupt
from stageline.ledger import LedgerStore, RunStatus
from stageline.ledger._checkpoint_read import (
    SavedInterrupt,
    Unsure,
    is_state_channel,
    latest_checkpoint,
)
from stageline.runner._state_defaults import recall
from stageline.runner._summary import RunSummary
from stageline.runner._trust_writes import check_writes
from stageline.statekeys import RESERVED_KEYS

__all__ = ["quick_status"]


def _is_interrupt(value: Any) -> bool:
    return isinstance(value, SavedInterrupt)


async def quick_status(ledger: LedgerStore, run_id: str, home: Path) -> RunSummary | None:
    """What ``Runner.status`` answers, read without LangGraph; None when only it can say
    (``home``: the project's, where the runner recorded its templates' unwritten values)."""
    run = await ledger.get_run(run_id)
    known = recall(home, run.template_version)
    if known is None:  # no process here has compiled this template: only LangGraph knows
        return None
    defaults, order = known
    records = await ledger.node_records(run_id)
    waits = await ledger.waits(run_id)
    try:
        saved = await latest_checkpoint(ledger, run_id)
    except Unsure:
        return None
    state: dict[str, Any] = {}
    if saved is not None:
        if any(is_state_channel(channel) for _, channel, _ in saved.writes):
            return None  # LangGraph folds finished tasks' writes in (through the reducers)
        values = {**defaults, **saved.channel_values}
        state = {k: values[k] for k in order if k in values and k not in RESERVED_KEYS}
        if run.status is RunStatus.WAITING:
            try:
                check_writes(saved.writes, run_id, waits, None, is_interrupt=_is_interrupt)
            except CheckpointCorrupt:
                return None
    return RunSummary(
        run=run,
        records=records,
        state=state,
        waits=waits,
        lineage=await ledger.lineage(run_id),
        cron_id=await ledger.fired_by(run_id),
        forks=await ledger.forks(run_id),
    )
