"""Run a template straight on LangGraph (no runner, no ledger) to see what its gate and question
nodes ask, answer them with any response at all (also ones the runner would never send), and
read the state they leave. Imported by tests as ``from direct_run import DirectRun``."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from stageline.llm import OfflineModel
from stageline.stages import RunContext
from stageline.templates import Template


class Journal:
    """The runner's journal as far as nodes use it: effects are kept (once per node and key)
    and budget grants are recorded."""

    def __init__(self, overruns: list[dict[str, Any] | None] | None = None) -> None:
        self.effects: dict[tuple[str, str], Any] = {}
        self.effect_calls: list[str] = []
        self.grants: list[tuple[str, str, float]] = []
        self.overruns = overruns

    def node_started(self, **_: Any) -> None:
        return None

    def node_finished(self, **_: Any) -> None:
        return None

    def node_event(self, **_: Any) -> None:
        return None

    async def effect(
        self, *, node: str, key: str, fn: Callable[[], Any], idempotent: bool = False
    ) -> Any:
        if (node, key) not in self.effects:
            self.effect_calls.append(key)
            made = fn()
            self.effects[(node, key)] = await made if inspect.isawaitable(made) else made
        return self.effects[(node, key)]

    def grant_budget(self, token: str, key: str, amount: float) -> None:
        self.grants.append((token, key, amount))


class BudgetJournal(Journal):
    """A journal that reports budget overruns, as the runner's does when a budget is set: the
    first of ``overruns`` until a budget gate grants more, then the next."""

    checks: list[tuple[str, str, dict[str, float] | None]]

    async def budget_overrun(
        self, node: str, task_id: str, *, pending: Mapping[str, float] | None = None
    ) -> dict[str, Any] | None:
        self.checks = [*getattr(self, "checks", []), (node, task_id, pending and dict(pending))]
        return self.overruns[0] if self.overruns else None  # the same until a grant

    def grant_budget(self, token: str, key: str, amount: float) -> None:
        super().grant_budget(token, key, amount)
        if self.overruns:
            self.overruns.pop(0)


class DirectRun:
    """One run of ``template`` on LangGraph's in-memory checkpointer."""

    def __init__(
        self,
        template: Template,
        *,
        run_id: str = "run-1",
        attempt: int = 1,
        journal: Journal | None = None,
    ) -> None:
        self.journal = journal or Journal()
        self.graph = template.build().compile(checkpointer=InMemorySaver())
        self.context = RunContext(
            run_id=run_id,
            attempt=attempt,
            template=template.name,
            services={},
            journal=self.journal,
            run_dir=Path("unused"),
            model=OfflineModel(),
        )
        self.config: dict[str, Any] = {"configurable": {"thread_id": run_id}}
        self.interrupt_id: str | None = None

    async def _go(self, payload: Any) -> dict[str, Any] | None:
        async for _ in self.graph.astream(
            payload, self.config, context=self.context, durability="sync"
        ):
            pass
        snapshot = await self.graph.aget_state(self.config)
        if not snapshot.interrupts:
            self.interrupt_id = None
            return None
        [asked] = snapshot.interrupts
        self.interrupt_id = asked.id
        return dict(asked.value)

    async def start(self, inputs: Mapping[str, Any]) -> dict[str, Any] | None:
        """Run until a node asks a person (its payload) or the run ends (None)."""
        return await self._go(dict(inputs))

    async def respond(self, response: Any) -> dict[str, Any] | None:
        """Resume the node that asked with ``response``: what it asks next, or None."""
        assert self.interrupt_id is not None, "nothing is waiting"
        return await self._go(Command(resume={self.interrupt_id: response}))

    async def state(self) -> dict[str, Any]:
        return dict((await self.graph.aget_state(self.config)).values)


def decision(asked: Mapping[str, Any], kind: str = "approve", **over: Any) -> dict[str, Any]:
    """What the runner resumes a gate with, for the attempt and state the gate showed."""
    made = {
        "decision": kind,
        "note": None,
        "actor": "ann",
        "attempt": asked["attempt"],
        "state_hash": asked["state_hash"],
        "token": "tok-1",
    }
    return {**made, **over}
