"""The runner's journal: node lifecycle facts staged into the ledger as records and events."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from stageline.ledger import Event, EventCategory, LedgerStore, NodeRecord, NodeStatus

__all__ = ["LedgerJournal"]

_LEVELS = {"succeeded": "info", "failed": "error", "waiting": "info"}


class LedgerJournal:
    """Implements the stages' ``Journal`` for one run attempt."""

    def __init__(self, ledger: LedgerStore, run_id: str, attempt: int) -> None:
        self._ledger = ledger
        self.run_id = run_id
        self.attempt = attempt
        self.last_failure: NodeRecord | None = None
        self.records: dict[tuple[str, int], NodeRecord] = {}
        """What this attempt recorded, by (task, try): a fresh run's summary needs no read."""

    def _stage(self, record: NodeRecord) -> None:
        self.records[(record.task_id, record.try_no)] = record
        self._ledger.stage_node(record)

    def node_started(self, *, node: str, task_id: str, try_no: int, stage: str) -> None:
        now = time.time()
        self._stage(
            NodeRecord(
                run_id=self.run_id, task_id=task_id, attempt=self.attempt, try_no=try_no,
                node=node, stage=stage, status=NodeStatus.RUNNING, started_at=now,
            )
        )
        self._ledger.stage_event(
            Event(run_id=self.run_id, kind="node.started", node=node, ts=now,
                  data={"attempt": self.attempt, "try": try_no})
        )

    def node_finished(
        self,
        *,
        node: str,
        task_id: str,
        try_no: int,
        stage: str,
        status: str,
        started: float,
        metrics: Mapping[str, float],
        error: str | None = None,
        failure_phase: str | None = None,
    ) -> None:
        now = time.time()
        record = NodeRecord(
            run_id=self.run_id, task_id=task_id, attempt=self.attempt, try_no=try_no, node=node,
            stage=stage, status=NodeStatus(status), started_at=started, finished_at=now,
            metrics=dict(metrics), error=error, failure_phase=failure_phase,
        )
        self._stage(record)
        if record.status is NodeStatus.FAILED:
            self.last_failure = record
        elif self.last_failure is not None and self.last_failure.task_id == task_id:
            self.last_failure = None  # a retry of that node succeeded: it did not fail the run
        data: dict[str, Any] = {"attempt": self.attempt, "try": try_no,
                                "duration": round(now - started, 6)}
        if metrics:
            data["metrics"] = dict(metrics)
        if failure_phase:
            data["failure_phase"] = failure_phase
        self._ledger.stage_event(
            Event(
                run_id=self.run_id, kind=f"node.{status}", node=node, ts=now,
                level=_LEVELS.get(status, "info"), message=error or "",
                category=EventCategory.ERROR if error else EventCategory.LIFECYCLE, data=data,
            )
        )

    def node_event(
        self, *, node: str, kind: str, level: str, message: str, data: Mapping[str, Any]
    ) -> None:
        self._ledger.stage_event(
            Event(run_id=self.run_id, kind=kind, node=node, level=level, message=message,
                  category=EventCategory.LOG, data=dict(data))
        )
