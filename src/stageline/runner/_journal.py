"""The runner's journal: node lifecycle facts staged into the ledger as records and events."""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from stageline.errors import EffectInDoubt
from stageline.ledger import (
    Effect,
    EffectStatus,
    Event,
    EventCategory,
    LedgerStore,
    NodeRecord,
    NodeStatus,
)

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
        self,
        *,
        node: str,
        kind: str,
        level: str,
        message: str,
        data: Mapping[str, Any],
        category: str = "log",
    ) -> None:
        self._ledger.stage_event(
            Event(run_id=self.run_id, kind=kind, node=node, level=level, message=message,
                  category=EventCategory(category), data=dict(data))
        )

    async def effect(
        self, *, node: str, key: str, fn: Callable[[], Any], idempotent: bool = False
    ) -> Any:
        """The side-effect journal: ``fn`` runs at most once per (run, node, key)."""
        found = await self._ledger.get_effect(self.run_id, node, key)
        if found is None and not await self._ledger.begin_effect(
            Effect(run_id=self.run_id, node=node, key=key, attempt=self.attempt)
        ):
            found = await self._ledger.get_effect(self.run_id, node, key)
        if found is not None:
            if found.status is EffectStatus.DONE:
                return found.result
            if not idempotent:
                raise EffectInDoubt(self.run_id, node, key, time.strftime(
                    "%Y-%m-%d %H:%M:%S", time.localtime(found.started_at)))
        try:
            result = fn()
            if inspect.isawaitable(result):
                result = await result
        except Exception:
            # It said it failed: nothing to keep, and a retry may run it again.
            await self._ledger.forget_effect(self.run_id, node, key)
            raise
        kept = json.loads(json.dumps(result, default=str))
        await self._ledger.finish_effect(self.run_id, node, key, kept)
        self._ledger.stage_event(
            Event(run_id=self.run_id, kind="effect.done", node=node, category=EventCategory.LOG,
                  level="debug", message=key, data={"key": key, "attempt": self.attempt})
        )
        return kept
