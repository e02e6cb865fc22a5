"""The runner's side of budgets: what a run (and each node) has used, and what gates granted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stageline.errors import InputError
from stageline.ledger import LedgerStore, NodeRecord, WaitKind, WaitStatus
from stageline.stages import BUDGET_INPUT, Budget, overrun

__all__ = ["BudgetBook", "run_budget", "with_budget"]


def with_budget(
    inputs: Mapping[str, Any], budget: Budget | Mapping[str, Any] | None
) -> dict[str, Any]:
    """The inputs to record, with a per-run budget beside them."""
    try:
        made = Budget.of(budget)
    except (TypeError, ValueError) as exc:
        raise InputError(f"bad budget {budget!r}: {exc}") from exc
    return {**inputs, BUDGET_INPUT: made.to_dict()} if made else dict(inputs)


def run_budget(template: Any, inputs: Mapping[str, Any]) -> Budget | None:
    """The template's budget with the run's own limits over it; None when neither sets one."""
    base = Budget.of(getattr(template, "budget", None))
    mine = Budget.of(inputs.get(BUDGET_INPUT))
    if base is None:
        return mine
    return base.over(mine)


def usage(records: Mapping[Any, NodeRecord]) -> dict[str, float]:
    tokens = cost = 0.0
    for r in records.values():
        tokens += float(r.metrics.get("input_tokens", 0)) + float(r.metrics.get("output_tokens", 0))
        cost += float(r.metrics.get("cost", 0))
    return {"tokens": tokens, "cost": cost}


class BudgetBook:
    """Usage and grants of one run, read from the ledger once per advance, then kept current."""

    def __init__(self, ledger: LedgerStore, run_id: str, budget: Budget) -> None:
        self._ledger = ledger
        self.run_id = run_id
        self.budget = budget
        self._past: dict[tuple[str, int, int], NodeRecord] | None = None
        self._ledger_grants: list[tuple[str, str, str, float]] = []
        """(task id, token, scope:measure, amount) of budget approvals applied before."""
        self.granted: dict[str, tuple[str, float]] = {}
        """This advance's grants: token -> (scope:measure, amount)."""

    async def _load(self) -> None:
        records = await self._ledger.node_records(self.run_id)
        self._past = {(r.task_id, r.attempt, r.try_no): r for r in records}
        for w in await self._ledger.waits(self.run_id):
            over = w.payload.get("budget")
            if (
                w.kind is WaitKind.GATE
                and isinstance(over, Mapping)
                and w.status is WaitStatus.APPLIED
                and w.decision == "approve"
            ):
                self._ledger_grants.append(
                    (
                        str(w.payload.get("task_id")),
                        w.token,
                        f"{over['scope']}:{over['measure']}",
                        float(over["ask"]),
                    )
                )

    async def overrun(
        self,
        node: str,
        task_id: str,
        attempt: int,
        mine: Mapping[tuple[str, int], NodeRecord],
        *,
        pending: Mapping[str, float] | None = None,
    ) -> dict[str, Any] | None:
        """The first used-up limit; ``pending`` is what the running node spent so far."""
        if self._past is None:
            await self._load()
        assert self._past is not None
        records = dict(self._past)
        records.update({(r.task_id, r.attempt, r.try_no): r for r in mine.values()})
        # The node about to run is not usage yet (a replay re-runs it from the start).
        records = {k: r for k, r in records.items() if not (k[0] == task_id and k[1] == attempt)}
        grants: dict[str, tuple[str, float]] = {
            token: (key, amount)
            for task, token, key, amount in self._ledger_grants
            if task != task_id  # this node's own gates come back through its replay
        }
        grants.update(self.granted)
        total: dict[str, float] = {}
        for key, amount in grants.values():
            total[key] = total.get(key, 0.0) + amount
        run_used = usage(records)
        node_used = usage({k: r for k, r in records.items() if r.node == node})
        for used in (run_used, node_used):
            for key, value in (pending or {}).items():
                used[key] = used.get(key, 0.0) + float(value)
        return overrun(self.budget, node, run_used, node_used, total)
