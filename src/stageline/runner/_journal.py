"""The runner's journal: node lifecycle facts staged into the ledger as records and events."""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable, Iterable, Mapping
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
    Outcome,
)
from stageline.runner._budget import BudgetBook
from stageline.stages import Budget

__all__ = ["LedgerJournal"]

ROUTER_HISTORY = 5000
"""At most this many of a template's newest routed outcomes inform its router."""
_LEVELS = {"succeeded": "info", "failed": "error", "waiting": "info"}


class LedgerJournal:
    """Implements the stages' ``Journal`` for one run attempt."""

    def __init__(
        self,
        ledger: LedgerStore,
        run_id: str,
        attempt: int,
        *,
        budget: Budget | None = None,
        previous: Iterable[NodeRecord] = (),
    ) -> None:
        self._ledger = ledger
        self.run_id = run_id
        self.attempt = attempt
        self.last_failure: NodeRecord | None = None
        self.records: dict[tuple[str, int], NodeRecord] = {}
        """What this attempt recorded, by (task, try): a fresh run's summary needs no read."""
        self._book = None if budget is None else BudgetBook(ledger, run_id, budget)
        self._history: dict[str, list[Outcome]] = {}
        self._earlier: dict[str, dict[int, NodeStatus]] = {}
        """This attempt's records from earlier processes: task -> try -> status."""
        self._succeeded: set[str] = set()
        """Tasks an earlier advance (of any attempt) recorded as succeeded."""
        for record in previous:
            if record.attempt == attempt:
                self._earlier.setdefault(record.task_id, {})[record.try_no] = record.status
            if record.status is NodeStatus.SUCCEEDED:
                self._succeeded.add(record.task_id)
        self._shift: dict[str, int] = {}
        """Task -> how far its tries are moved past those of an earlier process."""

    def _stage(self, record: NodeRecord) -> None:
        self.records[(record.task_id, record.try_no)] = record
        self._ledger.stage_node(record)

    def succeeded_before(self, task_id: str) -> bool:
        """Whether an earlier advance recorded the task's success. Its writes were saved with
        that record, so LangGraph replays them when the step runs again (a sibling waited or
        failed) and does not run the task: it announces it and never reports its end."""
        return task_id in self._succeeded

    def node_started(
        self, *, node: str, task_id: str, try_no: int, stage: str, at: float | None = None
    ) -> int:
        """Stage the start (``at``: when it began, if not now); returns the try number
        recorded. A node that an earlier process
        began and never finished (Ctrl-C, SIGTERM, a crash) runs again as a new try with its
        own start and duration; the replay of a node that waited for a person finishes that
        node's record instead."""
        try_no = self._try(task_id, try_no)
        now = time.time() if at is None else at
        self._stage(
            NodeRecord(
                run_id=self.run_id,
                task_id=task_id,
                attempt=self.attempt,
                try_no=try_no,
                node=node,
                stage=stage,
                status=NodeStatus.RUNNING,
                started_at=now,
            )
        )
        self._ledger.stage_event(
            Event(
                run_id=self.run_id,
                kind="node.started",
                node=node,
                ts=now,
                data={"attempt": self.attempt, "try": try_no},
            )
        )
        return try_no

    def _try(self, task_id: str, try_no: int) -> int:
        if task_id not in self._shift:
            earlier = self._earlier.get(task_id, {})
            clash = earlier.get(try_no)
            self._shift[task_id] = (
                max(earlier) - try_no + 1
                if clash is not None and clash is not NodeStatus.WAITING
                else 0
            )
        return try_no + self._shift[task_id]

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
        template: str | None = None,
        capability: str | None = None,
        alternative: str | None = None,
        input_shape: str = "",
        at: float | None = None,
    ) -> None:
        """Stage the end (``at``: when it ended, if not now)."""
        now = time.time() if at is None else at
        record = NodeRecord(
            run_id=self.run_id,
            task_id=task_id,
            attempt=self.attempt,
            try_no=try_no,
            node=node,
            stage=stage,
            status=NodeStatus(status),
            started_at=started,
            finished_at=now,
            metrics=dict(metrics),
            error=error,
            failure_phase=failure_phase,
        )
        self._stage(record)
        if template is not None and record.status in (NodeStatus.SUCCEEDED, NodeStatus.FAILED):
            self._stage_outcome(record, template, capability, alternative, input_shape)
        if record.status is NodeStatus.FAILED:
            self.last_failure = record
        elif self.last_failure is not None and self.last_failure.task_id == task_id:
            self.last_failure = None  # a retry of that node succeeded: it did not fail the run
        data: dict[str, Any] = {
            "attempt": self.attempt,
            "try": try_no,
            "duration": round(now - started, 6),
        }
        if metrics:
            data["metrics"] = dict(metrics)
        if failure_phase:
            data["failure_phase"] = failure_phase
        self._ledger.stage_event(
            Event(
                run_id=self.run_id,
                kind=f"node.{status}",
                node=node,
                ts=now,
                level=_LEVELS.get(status, "info"),
                message=error or "",
                category=EventCategory.ERROR if error else EventCategory.LIFECYCLE,
                data=data,
            )
        )

    def _stage_outcome(
        self,
        r: NodeRecord,
        template: str,
        capability: str | None,
        alternative: str | None,
        input_shape: str,
    ) -> None:
        m = r.metrics
        quality = m.get("quality")
        self._ledger.stage_outcome(
            Outcome(
                run_id=r.run_id,
                task_id=r.task_id,
                attempt=r.attempt,
                try_no=r.try_no,
                template=template,
                node=r.node,
                stage=r.stage,
                capability=capability,
                alternative=alternative,
                input_shape=input_shape,
                status=str(r.status),
                failure_phase=r.failure_phase,
                started_at=r.started_at,
                finished_at=r.finished_at or r.started_at,
                latency=(r.finished_at or r.started_at) - r.started_at,
                input_tokens=float(m.get("input_tokens", 0)),
                output_tokens=float(m.get("output_tokens", 0)),
                cost=float(m.get("cost", 0)),
                quality=None if quality is None else float(quality),
            )
        )

    async def router_history(self, template: str) -> list[Outcome]:
        """The template's routed outcomes, read once per advance (the router's training data)."""
        if template not in self._history:
            self._history[template] = await self._ledger.outcomes(
                template=template, routed=True, limit=ROUTER_HISTORY
            )
        return self._history[template]

    async def budget_overrun(
        self, node: str, task_id: str, *, pending: Mapping[str, float] | None = None
    ) -> dict[str, Any] | None:
        """The budget limit used up before ``node`` runs (or, with ``pending``, what it spent
        so far while running), or None (always None without a budget)."""
        if self._book is None:
            return None
        return await self._book.overrun(node, task_id, self.attempt, self.records, pending=pending)

    def grant_budget(self, token: str, key: str, amount: float) -> None:
        """A budget gate's approval: ``amount`` more for ``key`` (``scope:measure``)."""
        if self._book is not None:
            self._book.granted[token] = (key, amount)

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
            Event(
                run_id=self.run_id,
                kind=kind,
                node=node,
                level=level,
                message=message,
                category=EventCategory(category),
                data=dict(data),
            )
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
                raise EffectInDoubt(
                    self.run_id,
                    node,
                    key,
                    time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(found.started_at)),
                )
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
            Event(
                run_id=self.run_id,
                kind="effect.done",
                node=node,
                category=EventCategory.LOG,
                level="debug",
                message=key,
                data={"key": key, "attempt": self.attempt},
            )
        )
        return kept
