"""Gates and question nodes of a template: their options checked, their stage, route and spec
made (``gate_node``, ``question_node``); the builder's ``add_gate`` and ``add_question`` add
what these make to the graph."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from langgraph.graph import END

from stageline.errors import TemplateError, UsageError
from stageline.stages import (
    DEFAULT_DEADLINE,
    GATES_KEY,
    Stage,
    deadline_steps,
    gate_stage,
    normalize_questions,
    parse_duration,
    question_stage,
)
from stageline.stages._human import Author
from stageline.templates._graphs import _hints
from stageline.templates._shape import GateSpec, Loop, QuestionSpec, Where

__all__ = ["WaitNode", "gate_node", "gate_router", "question_node"]

Duration = float | int | str | timedelta


@dataclass(frozen=True, kw_only=True)
class WaitNode:
    """A node that waits for a person, ready to add: its stage and spec; for a gate, its route
    out (decision -> node) and the loop its changes go round where the template has none yet."""

    stage: Stage
    spec: GateSpec | QuestionSpec
    route: Callable[[Any], str] | None = None
    targets: dict[str, str] | None = None
    new_loop: Loop | None = None


def _options(
    kind: str, name: str, deadline: Duration, on_deadline: str | Sequence[str], where: Where
) -> tuple[float, tuple[str, ...]]:
    try:
        return (
            parse_duration(deadline, f"{kind} {name!r} deadline"),
            deadline_steps(on_deadline, kind),
        )
    except UsageError as exc:
        raise TemplateError(str(exc), source=where[0], line=where[1]) from exc


def gate_node(
    name: str,
    *,
    state: type[Any],
    loops: Sequence[Loop],
    changes_to: str | None = None,
    reject_to: str | None = None,
    max_changes: int = 3,
    feedback_key: str = "feedback",
    show: Sequence[str] = (),
    deadline: Duration = DEFAULT_DEADLINE,
    on_deadline: str | Sequence[str] = "park",
    where: Where,
) -> WaitNode:
    """Gate node ``name`` of a template over ``state`` with ``loops``: the run waits there until
    a person approves (the run goes on along the gate's edge, or ends), rejects (the run ends
    ``rejected``, or goes to ``reject_to``) or requests changes (back to ``changes_to`` with the
    note in ``feedback_key``, at most ``max_changes`` times). Past ``deadline`` the sweeper
    applies ``on_deadline``: remind, escalate, then ``reject``, ``park`` or ``fail``.
    """

    def fail(message: str) -> TemplateError:
        return TemplateError(f"gate {name!r}: {message}", source=where[0], line=where[1])

    seconds, steps = _options("gate", name, deadline, on_deadline, where)
    if not isinstance(max_changes, int) or isinstance(max_changes, bool) or max_changes < 0:
        raise fail(f"max_changes must be a whole number, got {max_changes!r}")
    hints = _state_keys(state)
    if changes_to is not None and hints and feedback_key not in hints:
        raise fail(
            f"changes put the note in state key {feedback_key!r}, which the state "
            f"does not declare (keys: {', '.join(sorted(hints))})"
        )
    loop = new_loop = None
    if changes_to is not None:
        loop = next((lp for lp in loops if lp.head == changes_to), None)
        if loop is None:
            loop = new_loop = Loop(
                name=f"{name}.changes", head=changes_to, max_iterations=max_changes + 1, where=where
            )
    made = gate_stage(
        name,
        changes_to=changes_to,
        reject_to=reject_to,
        feedback_key=feedback_key,
        changes_loop=(loop.name, loop.max_iterations) if loop else None,
        max_changes=max_changes,
        show=tuple(show),
        deadline=seconds,
        on_deadline=steps,
    )
    targets = {"changes": changes_to or name, "reject": reject_to or END}
    if changes_to is None:
        del targets["changes"]
    spec = GateSpec(
        name=name, changes_to=changes_to, reject_to=reject_to, deadline=seconds, on_deadline=steps
    )
    return WaitNode(
        stage=made, spec=spec, route=gate_router(name), targets=targets, new_loop=new_loop
    )


def gate_router(name: str) -> Callable[[Any], str]:
    """The route out of gate ``name``: its decision (``approve`` follows the gate's edge)."""

    def route(state: Any) -> str:
        decisions = (
            state.get(GATES_KEY) if isinstance(state, Mapping) else getattr(state, GATES_KEY, None)
        ) or {}
        return str(decisions.get(name, "approve"))

    route.__name__ = route.__qualname__ = f"gate_route[{name}]"
    return route


def question_node(
    name: str,
    *,
    state: type[Any],
    questions: Any = None,
    ask: Author | None = None,
    max_turns: int = 1,
    history_key: str = "qa_history",
    answers_key: str | None = None,
    deadline: Duration = DEFAULT_DEADLINE,
    on_deadline: str | Sequence[str] = "park",
    where: Where,
) -> WaitNode:
    """Question node ``name`` of a template over ``state``: it asks ``questions`` (or, turn
    after turn, what ``ask`` authors until it returns nothing, at most ``max_turns`` sets),
    records each set and its answers in ``history_key`` and, with ``answers_key``, the answers
    there. Past ``deadline`` the sweeper applies ``on_deadline``: remind, escalate, then
    ``default`` (each question's default answer), ``park`` or ``fail``.
    """

    def fail(message: str) -> TemplateError:
        return TemplateError(f"question node {name!r}: {message}", source=where[0], line=where[1])

    seconds, steps = _options("question", name, deadline, on_deadline, where)
    hints = _state_keys(state)
    for key in (history_key, answers_key):
        if key is not None and hints and key not in hints:
            raise fail(
                f"it writes state key {key!r}, which the state does not declare "
                f"(keys: {', '.join(sorted(hints))})"
            )
    try:
        made = question_stage(
            name,
            questions=questions,
            ask=ask,
            max_turns=max_turns,
            history_key=history_key,
            answers_key=answers_key,
            deadline=seconds,
            on_deadline=steps,
        )
    except UsageError as exc:
        raise fail(str(exc)) from exc
    if steps[-1] == "default" and questions is not None:
        asked = normalize_questions(questions)
        if missing := [q["id"] for q in asked if q["required"] and "default" not in q]:
            raise fail(f"on_deadline `default` needs a default for question {missing[0]!r}")
    spec = QuestionSpec(name=name, max_turns=max_turns, deadline=seconds, on_deadline=steps)
    return WaitNode(stage=made, spec=spec)


def _state_keys(schema: type[Any]) -> set[str]:
    return set(_hints(schema))
