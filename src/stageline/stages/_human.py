"""Gates and question nodes: stages that wait for a person through LangGraph's ``interrupt()``.

A node interrupts with a plain-dict payload; the runner records it as a *wait* in the ledger,
and resumes the node with ``Command(resume={interrupt id: response})`` once a decision or an
answer is recorded. The node checks what it is given: a decision for another attempt or another
state, or answers that do not fit, are refused and the node asks again.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stageline.errors import UsageError
from stageline.stages._context import StageContext
from stageline.stages._questions import normalize_questions
from stageline.stages._stage import Stage
from stageline.stages._waiting import (
    DEFAULT_DEADLINE,
    ask_person,
    state_hash,
    state_values,
    wait_for_decision,
)
from stageline.statekeys import GATES_KEY, LOOPS_KEY

__all__ = ["Author", "gate_stage", "question_stage"]

MACHINERY = {"machinery": True}
"""Stage metadata of the nodes stageline makes itself: a template's digest covers their options,
not stageline's code, so upgrading stageline leaves the templates that use them unchanged."""
Author = Callable[[Any, list[dict[str, Any]], StageContext], Any]
"""``(state, history so far, ctx) -> questions | None``: None or [] when satisfied."""


def _clip(value: Any, limit: int = 2000) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return value[: limit - 1] + "…"
    return value


def changes_asked_key(gate: str) -> str:
    """The key under ``LOOPS_KEY`` that counts the changes asked at ``gate``."""
    return f"gate:{gate}:changes"


def gate_stage(
    name: str,
    *,
    changes_to: str | None = None,
    reject_to: str | None = None,
    feedback_key: str = "feedback",
    changes_loop: tuple[str, int] | None = None,
    max_changes: int | None = None,
    show: Sequence[str] = (),
    deadline: float = DEFAULT_DEADLINE,
    on_deadline: Sequence[str] = ("remind", "escalate", "park"),
    park: Mapping[str, Any] | None = None,
) -> Stage:
    """The stage of a gate node: waits for approve, reject or request changes.

    ``changes_loop`` is ``(loop name, bound)`` of the loop of ``changes_to`` (each round of
    changes runs it again); ``max_changes`` bounds the changes asked at this gate (counted in
    the run's state, apart from the loop, which other routes may share). The rounds left are
    the fewer of the two.
    ``park`` makes it a park gate (the run is ``parked``): ``{"loop": name, "rounds": n}``;
    approve or changes there grant the loop ``n`` more rounds.
    """

    asked = changes_asked_key(name)

    async def run_gate(state: Any, ctx: StageContext) -> dict[str, Any]:
        digest = state_hash(state)
        values = state_values(state)
        counts = values.get(LOOPS_KEY) or {}
        left = None
        if changes_loop is not None:
            left = max(0, changes_loop[1] - counts.get(changes_loop[0], 0))
            if max_changes is not None:
                left = max(0, min(left, max_changes - counts.get(asked, 0)))
        payload: dict[str, Any] = {
            "kind": "gate",
            "gate": name,
            "node": ctx.node,
            "attempt": ctx.attempt,
            "state_hash": digest,
            "deadline": deadline,
            "on_deadline": list(on_deadline),
            "changes_to": changes_to,
            "reject_to": reject_to,
            "changes_left": left,
            "show": {k: _clip(values[k]) for k in show if k in values},
        }
        if park is not None:
            payload["park"] = dict(park)
        decision = wait_for_decision(payload)
        update: dict[str, Any] = {GATES_KEY: {name: decision["decision"]}}
        loops: dict[str, int] = {}
        if decision["decision"] == "changes":
            update[feedback_key] = decision.get("note") or ""
            loops[asked] = 1
        if park is not None and decision["decision"] not in ("reject", "takeover"):
            loops[str(park["loop"])] = -int(park["rounds"])  # more rounds
        if loops:
            update[LOOPS_KEY] = loops
        return update

    run_gate.__name__ = run_gate.__qualname__ = f"gate[{name}]"
    return Stage(
        fn=run_gate,
        name=f"gate:{name}",
        capability="approval",
        cost_class="none",
        metadata=MACHINERY,
    )


def question_stage(
    name: str,
    *,
    questions: Any = None,
    ask: Author | None = None,
    max_turns: int = 1,
    history_key: str = "qa_history",
    answers_key: str | None = None,
    deadline: float = DEFAULT_DEADLINE,
    on_deadline: Sequence[str] = ("remind", "escalate", "park"),
) -> Stage:
    """The stage of a question node: asks a fixed question set, or what ``ask`` authors, turn
    after turn until ``ask`` is satisfied or ``max_turns`` sets were asked.

    Each set's id is ``question_id(run_id, turn, node=node)``, ``turn`` counting the sets already in
    ``history_key``; what ``ask`` authors is kept by the side-effect journal, so a replay asks
    the same questions without calling it (a model) again.
    """
    if (questions is None) == (ask is None):
        raise UsageError("a question node takes `questions` or `ask`, not both or neither")
    fixed = None if questions is None else normalize_questions(questions)
    if not isinstance(max_turns, int) or max_turns < 1:
        raise UsageError("max_turns must be at least 1")

    async def author(
        state: Any, history: list[dict[str, Any]], ctx: StageContext, local: int
    ) -> list[dict[str, Any]] | None:
        if ask is None:
            return fixed if local == 0 else None

        async def call() -> Any:
            made = ask(state, history, ctx)
            made = await made if inspect.isawaitable(made) else made
            return normalize_questions(made) if made else None

        made = await ctx.effect(f"questions:{len(history)}", call, idempotent=True)
        return list(made) if made else None

    async def run_question(state: Any, ctx: StageContext) -> dict[str, Any]:
        history = list(state_values(state).get(history_key) or [])
        asked_now: list[dict[str, Any]] = []
        for local in range(max_turns):
            qs = await author(state, history + asked_now, ctx, local)
            if not qs:
                break
            asked_now.append(
                ask_person(
                    ctx,
                    qs,
                    turn=len(history) + local,
                    name=name,
                    deadline=deadline,
                    on_deadline=on_deadline,
                )
            )
        update: dict[str, Any] = {history_key: history + asked_now}
        if answers_key:
            merged: dict[str, Any] = {}
            for entry in asked_now:
                merged.update(entry["answers"])
            update[answers_key] = merged
        return update

    run_question.__name__ = run_question.__qualname__ = f"question[{name}]"
    return Stage(
        fn=run_question,
        name=f"question:{name}",
        capability="clarify",
        cost_class="none",
        metadata=MACHINERY,
    )
