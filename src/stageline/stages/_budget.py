"""Token and cost budgets, per run and per node, and the budget gate a node waits at.

Before a node runs, the node wrapper asks the journal whether the run (or the node) has used
its budget. If so, the node interrupts with a gate payload like any other gate ("approve N more
tokens?"): ``stageline approve`` grants the amount asked and the run goes on; a reject fails the
run with failure phase ``budget``. A grant is kept with the gate's decision in the ledger, so
later nodes (and later advances) see the raised budget.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stageline.errors import RunError, UsageError
from stageline.stages._context import StageContext
from stageline.stages._waiting import state_hash, wait_for_decision

__all__ = [
    "BUDGET_INPUT",
    "Budget",
    "BudgetRejected",
    "budget_gate",
    "enforce_budget",
    "live_overrun",
    "overrun",
]

BUDGET_INPUT = "stageline_budget"
"""The run input (kept with the run, never given to the graph) holding a per-run budget."""

MEASURES = ("tokens", "cost")


class BudgetRejected(RunError):
    """A person rejected a budget gate: the run stops instead of spending more."""

    failure_phase = "budget"


@dataclass(frozen=True, kw_only=True)
class Budget:
    """Limits on tokens (input + output) and cost, for the run and for single nodes."""

    tokens: float | None = None
    cost: float | None = None
    nodes: Mapping[str, Budget] = field(default_factory=dict)
    """Per-node limits (all runs of that node in one run add up)."""
    ask_tokens: float | None = None
    """How many more tokens a budget gate asks for; default: the limit again."""
    ask_cost: float | None = None

    @classmethod
    def of(cls, value: Budget | Mapping[str, Any] | None) -> Budget | None:
        """A budget from a ``Budget``, a mapping (YAML / JSON), or None."""
        if value is None or isinstance(value, Budget):
            return value
        if not isinstance(value, Mapping):
            raise UsageError(f"a budget is a mapping of tokens/cost/nodes, got {value!r}")
        data = dict(value)
        nodes = {str(k): cls.of(v) for k, v in dict(data.pop("nodes", None) or {}).items()}
        unknown = set(data) - {"tokens", "cost", "ask_tokens", "ask_cost"}
        if unknown:
            raise UsageError(
                f"unknown budget field {sorted(unknown)[0]!r}; "
                "use tokens, cost, ask_tokens, ask_cost, nodes"
            )
        for key, limit in data.items():
            if limit is not None and (isinstance(limit, bool) or not 0 < float(limit) < math.inf):
                raise UsageError(f"budget {key} must be a positive number, got {limit!r}")
        return cls(
            **{k: None if v is None else float(v) for k, v in data.items()},
            nodes={k: v for k, v in nodes.items() if v is not None},
        )

    def over(self, other: Budget | None) -> Budget:
        """This budget with ``other``'s limits taking precedence where it sets them."""
        if other is None:
            return self
        pick = {
            k: getattr(other, k) if getattr(other, k) is not None else getattr(self, k)
            for k in ("tokens", "cost", "ask_tokens", "ask_cost")
        }
        return Budget(**pick, nodes={**self.nodes, **other.nodes})

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            k: getattr(self, k)
            for k in ("tokens", "cost", "ask_tokens", "ask_cost")
            if getattr(self, k) is not None
        }
        if self.nodes:
            out["nodes"] = {k: v.to_dict() for k, v in self.nodes.items()}
        return out


def overrun(
    budget: Budget,
    node: str,
    run_used: Mapping[str, float],
    node_used: Mapping[str, float],
    granted: Mapping[str, float],
) -> dict[str, Any] | None:
    """The first limit that is used up before ``node`` runs, or None.

    ``granted`` is what budget gates added so far, by ``"{scope}:{measure}"``.
    """
    scopes = [("run", budget, run_used)]
    if node in budget.nodes:
        scopes.append((f"node:{node}", budget.nodes[node], node_used))
    for scope, limits, used in scopes:
        for measure in MEASURES:
            base = getattr(limits, measure)
            if base is None:
                continue
            limit = base + granted.get(f"{scope}:{measure}", 0.0)
            if used.get(measure, 0.0) >= limit:
                ask = getattr(limits, f"ask_{measure}") or base
                return {
                    "scope": scope,
                    "measure": measure,
                    "limit": limit,
                    "used": used.get(measure, 0.0),
                    "ask": ask,
                }
    return None


def _describe(over: Mapping[str, Any]) -> str:
    unit = "tokens" if over["measure"] == "tokens" else "in cost"
    whose = "the run" if over["scope"] == "run" else f"node {over['scope'][5:]!r}"
    return (
        f"{whose} used {over['used']:g} of its {over['limit']:g} {unit}; "
        f"approve {over['ask']:g} more {unit}?"
    )


async def enforce_budget(ctx: StageContext, state: Any, task_id: str) -> None:
    """Wait at a budget gate for each used-up limit before the node runs (no-op without one)."""
    check = getattr(ctx.run.journal, "budget_overrun", None)
    if check is None:
        return
    while (over := await check(ctx.node, task_id)) is not None:
        await budget_gate(ctx, state, task_id, over)


async def live_overrun(ctx: StageContext, spent: Mapping[str, float]) -> dict[str, Any] | None:
    """The budget limit this node's in-flight ``spent`` (metric names) has used up, or None.

    For a stage that spends while it runs (an agent): the run's and the node's usage so far,
    with what the node spent before this pass, checked against the same limits as before a node.
    """
    check = getattr(ctx.run.journal, "budget_overrun", None)
    if check is None:
        return None
    pending = {
        "tokens": float(spent.get("input_tokens", 0)) + float(spent.get("output_tokens", 0)),
        "cost": float(spent.get("cost", 0)),
    }
    found: dict[str, Any] | None = await check(ctx.node, ctx.task_id, pending=pending)
    return found


async def budget_gate(ctx: StageContext, state: Any, task_id: str, over: Mapping[str, Any]) -> None:
    """Wait at the budget gate for ``over``: returns once approved (the amount asked granted);
    a reject raises ``BudgetRejected``."""
    digest = state_hash(state)
    name = "budget" if over["scope"] == "run" else f"budget:{ctx.node}"
    payload: dict[str, Any] = {
        "kind": "gate",
        "gate": name,
        "node": ctx.node,
        "attempt": ctx.attempt,
        "state_hash": digest,
        "deadline": 24 * 3600.0,
        "on_deadline": ["remind", "escalate", "park"],
        "changes_to": None,
        "reject_to": None,
        "changes_left": None,
        "show": {"budget": _describe(over)},
        "budget": dict(over),
        "task_id": task_id,
    }
    decision = wait_for_decision(payload)
    if decision["decision"] != "approve":
        note = f": {decision.get('note')}" if decision.get("note") else ""
        raise BudgetRejected(f"budget gate {name!r} rejected ({_describe(over)}){note}")
    ctx.run.journal.grant_budget(  # type: ignore[attr-defined]
        str(decision.get("token") or ""), f"{over['scope']}:{over['measure']}", float(over["ask"])
    )
