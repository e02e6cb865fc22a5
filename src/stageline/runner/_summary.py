"""What ``show`` prints of a run: a module of its own, so reading one needs no LangGraph."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stageline.ledger import Lineage, NodeRecord, Run, RunStatus, Wait, WaitKind, WaitStatus

__all__ = ["RunSummary"]


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """What a run did: its ledger row, per-node records and its latest state."""

    run: Run
    records: list[NodeRecord]
    state: dict[str, Any]
    waits: list[Wait] = field(default_factory=list)
    """Gates and question sets: every round (``status``), or what the run now waits on."""
    checkpoint_error: str | None = None
    """Why the run's checkpoint cannot be read (``status``): ``state`` is then empty."""
    lineage: Lineage | None = None
    """Where the run was forked from (None: it is no fork)."""
    forks: list[Lineage] = field(default_factory=list)
    """The runs forked from it (filled by ``Runner.status``)."""
    cron_id: str | None = None
    """The schedule whose firing started it (None: no schedule did)."""

    @property
    def status(self) -> RunStatus:
        return self.run.status

    @property
    def waiting(self) -> list[Wait]:
        """What the run waits on: pending gates, question sets, interrupts, CI."""
        return [w for w in self.waits if w.status is WaitStatus.PENDING]

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run.to_dict(),
            "records": [r.to_dict() for r in self.records],
            "state": self.state,
            "decisions": [w.to_dict() for w in self.waits if w.kind is WaitKind.GATE],
            "questions": [w.to_dict() for w in self.waits if w.kind is WaitKind.QUESTION],
            "interrupts": [w.to_dict() for w in self.waits if w.kind is WaitKind.INTERRUPT],
            "ci": [w.to_dict() for w in self.waits if w.kind is WaitKind.CI],
            "checkpoint_error": self.checkpoint_error,
            "lineage": {
                "forked_from": self.lineage.to_dict() if self.lineage else None,
                "forks": [f.to_dict() for f in self.forks],
                "cron_id": self.cron_id,
            },
        }
