"""What a stage receives besides the state: run identity, services, a logger, metrics."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from langgraph.store.base import BaseStore

from stageline.llm import ChatModel
from stageline.stages._waiting import DEFAULT_DEADLINE, ask_person, deadline_steps, parse_duration

__all__ = ["Journal", "RunContext", "StageContext", "StageLogger"]

_log = logging.getLogger("stageline.stage")


class Journal(Protocol):
    """Where node lifecycle facts go; the runner implements it over the ledger."""

    def node_started(
        self, *, node: str, task_id: str, try_no: int, stage: str, at: float | None = None
    ) -> int | None:
        """Record the start (``at``: when it began, if not now); may return the try number to
        use instead of ``try_no`` (a node re-run after its process stopped is a new try)."""
        ...

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
    ) -> None:
        """Record how a node run ended; with ``template``, also its capability outcome row."""
        ...

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
        """Stage one event; ``category`` is an ``EventCategory`` value (harness events differ)."""
        ...

    async def effect(
        self, *, node: str, key: str, fn: Callable[[], Any], idempotent: bool = False
    ) -> Any:
        """Run ``fn`` at most once per (run, node, key); its kept result on every later call."""
        ...


@dataclass(kw_only=True)
class RunContext:
    """LangGraph runtime context for one run: travels beside the state, never inside it."""

    run_id: str
    attempt: int
    template: str
    services: Mapping[str, Any]
    journal: Journal
    run_dir: Path
    model: ChatModel


class StageLogger:
    """A logger whose lines become ``stage.log`` events in the run ledger."""

    def __init__(self, ctx: StageContext) -> None:
        self._ctx = ctx

    def _emit(self, level: str, message: str, data: Mapping[str, Any]) -> None:
        _log.log(logging.getLevelName(level.upper()), "[%s] %s", self._ctx.node, message)
        self._ctx.run.journal.node_event(
            node=self._ctx.node, kind="stage.log", level=level, message=message, data=data
        )

    def debug(self, message: str, **data: Any) -> None:
        self._emit("debug", message, data)

    def info(self, message: str, **data: Any) -> None:
        self._emit("info", message, data)

    def warning(self, message: str, **data: Any) -> None:
        self._emit("warning", message, data)

    def error(self, message: str, **data: Any) -> None:
        self._emit("error", message, data)


@dataclass(kw_only=True)
class StageContext:
    """The second argument of every stage."""

    run: RunContext
    node: str
    try_no: int = 1
    """LangGraph's attempt number for this node within one run attempt (RetryPolicy)."""
    task_id: str = ""
    """LangGraph's id of this node's task (what budgets and gates key on)."""
    metrics: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    store: BaseStore | None = None
    """LangGraph's store (``runtime.store``): what stages keep across runs and threads, on
    the project's database (``await ctx.store.aput(("ns",), "key", {...})``); ``None`` only
    for a graph compiled without one."""
    writer: Callable[[Any], None] | None = None
    """LangGraph's stream writer of this node (``runtime.stream_writer``); see ``write``."""

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def attempt(self) -> int:
        """The run's attempt: 1, then +1 for each ``retry``."""
        return self.run.attempt

    @property
    def services(self) -> Mapping[str, Any]:
        return self.run.services

    @property
    def model(self) -> ChatModel:
        return self.run.model

    @property
    def run_dir(self) -> Path:
        return self.run.run_dir

    @property
    def log(self) -> StageLogger:
        return StageLogger(self)

    async def effect(self, key: str, fn: Callable[[], Any], *, idempotent: bool = False) -> Any:
        """Run the side effect ``fn`` at most once for this run, node and ``key``.

        LangGraph re-runs an interrupted node from its start (and ``retry`` re-runs a failed
        one), so a side effect before ``interrupt()`` would happen again. Through ``effect`` it
        happens once: its result is kept in the ledger (as JSON) and returned on every later
        call. One that started but never recorded its result (the process stopped in between)
        is *in doubt*: a later call raises ``EffectInDoubt`` naming it, unless ``idempotent``
        says running it again is harmless. ``fn`` may be sync or async; if it raises, nothing
        is kept and a retry runs it again. A node that runs more than once in a run (a loop)
        and means to repeat the effect each time puts the round in ``key``.
        """
        return await self.run.journal.effect(node=self.node, key=key, fn=fn, idempotent=idempotent)

    def ask(
        self,
        questions: Any,
        *,
        turn: int,
        name: str | None = None,
        deadline: float | str | None = None,
        on_deadline: str | Any = "park",
    ) -> dict[str, Any]:
        """Ask a person a question set from inside this stage and wait for the answers.

        ``questions``: strings (free text) or mappings (``text``, ``id``, ``choices``,
        ``schema``, ``default``). ``turn`` numbers the run's question sets (give each its own);
        the set's id, ``question_id(run_id, turn, node=node)``, is the same on every replay. Returns
        ``{turn, question_id, questions, answers, actor}``. Side effects before it belong in
        ``effect``: LangGraph re-runs the node from its start once the answers come.
        """
        return ask_person(
            self,
            questions,
            turn=turn,
            name=name,
            deadline=DEFAULT_DEADLINE if deadline is None else parse_duration(deadline),
            on_deadline=deadline_steps(on_deadline, "question"),
        )

    def write(self, chunk: Any) -> None:
        """Send ``chunk`` (JSON data) to the run's ``custom`` stream, as a LangGraph node's
        ``get_stream_writer()`` does: a LangGraph client streaming the run in mode ``custom``
        gets it as it is written; nothing happens when no one streams that mode."""
        if self.writer is not None:
            self.writer(chunk)

    def metric(self, name: str, value: float) -> None:
        """Record a per-node metric; a repeated name adds up (tokens over several calls)."""
        self.metrics[name] = self.metrics.get(name, 0.0) + float(value)
